/* SPDX-License-Identifier: MIT */
/* The configuration files' value syntax: see units.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "units.h"

/* "123", "64K", "1M", "2G" (binary multiples). */
int pd_parse_size(const char *s, uint64_t *ret)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -EINVAL;
	uint64_t mul = 1;
	switch (*end) {
	case 0: break;
	case 'k': case 'K': mul = 1ull << 10; end++; break;
	case 'm': case 'M': mul = 1ull << 20; end++; break;
	case 'g': case 'G': mul = 1ull << 30; end++; break;
	case 't': case 'T': mul = 1ull << 40; end++; break;
	default: return -EINVAL;
	}
	if (*end == 'i' && end[-1] != 0)
		end++;
	if (*end == 'B')
		end++;
	if (*end || (v && mul > UINT64_MAX / v))
		return -EINVAL;
	*ret = v * mul;
	return 0;
}

/* "30" (seconds), "500ms", "30s", "5m", "1h". */
int pd_parse_ms(const char *s, uint64_t *ret)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return -EINVAL;
	uint64_t mul;
	if (!*end || !strcmp(end, "s"))
		mul = 1000;
	else if (!strcmp(end, "ms"))
		mul = 1;
	else if (!strcmp(end, "m") || !strcmp(end, "min"))
		mul = 60000;
	else if (!strcmp(end, "h"))
		mul = 3600000;
	else
		return -EINVAL;
	if (v > UINT64_MAX / mul)
		return -EINVAL;
	*ret = v * mul;
	return 0;
}

int pd_parse_bool(const char *s, bool *ret)
{
	if (!strcasecmp(s, "yes") || !strcasecmp(s, "true") || !strcasecmp(s, "on") || !strcmp(s, "1"))
		*ret = true;
	else if (!strcasecmp(s, "no") || !strcasecmp(s, "false") || !strcasecmp(s, "off") || !strcmp(s, "0"))
		*ret = false;
	else
		return -EINVAL;
	return 0;
}

size_t pd_ini_value_len(const char *v)
{
	size_t n = 0;
	for (size_t i = 0; v[i]; i++) {
		if ((v[i] == '#' || v[i] == ';') && i && (v[i - 1] == ' ' || v[i - 1] == '\t'))
			break;
		n = i + 1;
	}
	while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
		n--;
	return n;
}
