/* SPDX-License-Identifier: MIT */
/* Line logging to stderr, journald-aware (see log.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static int max_level = PD_LOG_INFO;
static bool journal; /* prefix "<N>" instead of a timestamp */

/* JOURNAL_STREAM is "DEV:INODE" of the stream journald gave us; only trust
 * it if it is still our stderr (a child of a service may have stderr
 * redirected elsewhere). */
void pd_log_init(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	struct stat st;
	unsigned long long dev, ino;

	journal = false;
	if (js && sscanf(js, "%llu:%llu", &dev, &ino) == 2 && fstat(STDERR_FILENO, &st) == 0 &&
	    (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino)
		journal = true;
}

void pd_log_set_level(enum pd_log_level lvl) { max_level = (int)lvl; }

bool pd_log_is_debug(void) { return max_level >= PD_LOG_DEBUG; }

int pd_log_level_parse(const char *s)
{
	static const struct { const char *name; int lvl; } names[] = {
		{ "err", PD_LOG_ERR }, { "error", PD_LOG_ERR }, { "warning", PD_LOG_WARN },
		{ "warn", PD_LOG_WARN }, { "notice", PD_LOG_NOTICE }, { "info", PD_LOG_INFO },
		{ "debug", PD_LOG_DEBUG },
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcasecmp(s, names[i].name))
			return names[i].lvl;
	return -EINVAL;
}

void pd_log(enum pd_log_level lvl, const char *group, const char *fmt, ...)
{
	static const char *const lname[8] = { "", "", "", "error", "warning", "notice", "info", "debug" };
	char line[1024];
	int n;
	int saved = errno;

	if ((int)lvl > max_level)
		return;
	if (journal) {
		n = snprintf(line, sizeof(line), "<%d>[%s] ", (int)lvl, group);
	} else {
		struct timespec ts;
		struct tm tm;
		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ pgpdecd %s [%s] ",
		             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
		             tm.tm_sec, ts.tv_nsec / 1000000, lname[lvl & 7], group);
	}
	if (n < 0 || (size_t)n >= sizeof(line))
		n = 0;
	va_list ap;
	va_start(ap, fmt);
	errno = saved; /* for %m */
	int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (m < 0)
		m = 0;
	size_t len = (size_t)n + (size_t)m;
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	/* Attacker-controlled text (file names, details) must not forge lines. */
	for (size_t i = (size_t)n; i < len; i++)
		if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
			line[i] = '?';
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
	errno = saved;
}
