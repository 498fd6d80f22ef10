/* SPDX-License-Identifier: MIT */
/* Line logging to stderr, journald-aware (see log.h). */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/uio.h>
#include <unistd.h>

#ifdef PD_HAVE_SYSTEMD
#include <systemd/sd-journal.h>
#endif

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
bool pd_log_enabled(enum pd_log_level lvl) { return (int)lvl <= max_level; }

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

/* One line into line[] (without the newline): the prefix, then the text
 * with control characters replaced.  Returns its length; *ret_text is
 * where the text (after the journald prefix) starts. */
static size_t format_line(char *line, size_t cap, enum pd_log_level lvl, const char *group, const char *fmt,
                          va_list ap, int saved_errno, size_t *ret_text)
{
	static const char *const lname[8] = { "", "", "", "error", "warning", "notice", "info", "debug" };
	int n;

	if (journal) {
		n = snprintf(line, cap, "<%d>[%s] ", (int)lvl, group);
	} else {
		struct timespec ts;
		struct tm tm;
		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		n = snprintf(line, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ pgpdecd %s [%s] ",
		             tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
		             tm.tm_sec, ts.tv_nsec / 1000000, lname[lvl & 7], group);
	}
	if (n < 0 || (size_t)n >= cap)
		n = 0;
	errno = saved_errno; /* for %m */
	int m = vsnprintf(line + n, cap - (size_t)n - 1, fmt, ap);
	if (m < 0)
		m = 0;
	size_t len = (size_t)n + (size_t)m;
	if (len > cap - 2)
		len = cap - 2;
	/* Attacker-controlled text (file names, details) must not forge lines. */
	for (size_t i = (size_t)n; i < len; i++)
		if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f)
			line[i] = '?';
	line[len] = '\0';
	/* The journald prefix "<N>" is for the stream; the text keeps "[GROUP] ". */
	*ret_text = journal ? (size_t)(strchr(line, '>') - line) + 1 : 0;
	return len;
}

static void write_line(char *line, size_t len)
{
	line[len++] = '\n';
	ssize_t w = write(STDERR_FILENO, line, len);
	(void)w;
}

static void vlog(enum pd_log_level lvl, const char *group, const char *const *fields, size_t n_fields,
                 const char *fmt, va_list ap)
{
	char line[1024];
	size_t text;
	int saved = errno;

	size_t len = format_line(line, sizeof(line), lvl, group, fmt, ap, saved, &text);
#ifdef PD_HAVE_SYSTEMD
	if (journal && n_fields) {
		/* Native protocol: the fields are searchable.  MESSAGE is the
		 * stream line's text; PRIORITY and SYSLOG_IDENTIFIER as the
		 * stream would have set them. */
		struct iovec iov[3 + PD_LOG_MAX_FIELDS];
		char msg[sizeof(line) + 8], prio[16];
		size_t k = 0;
		snprintf(msg, sizeof(msg), "MESSAGE=%s", line + text);
		snprintf(prio, sizeof(prio), "PRIORITY=%d", (int)lvl);
		iov[k++] = (struct iovec){ msg, strlen(msg) };
		iov[k++] = (struct iovec){ prio, strlen(prio) };
		iov[k++] = (struct iovec){ (char *)"SYSLOG_IDENTIFIER=pgpdecd", strlen("SYSLOG_IDENTIFIER=pgpdecd") };
		for (size_t i = 0; i < n_fields && i < PD_LOG_MAX_FIELDS; i++)
			iov[k++] = (struct iovec){ (char *)fields[i], strlen(fields[i]) };
		if (sd_journal_sendv(iov, (int)k) >= 0) {
			errno = saved;
			return;
		}
		/* journald unreachable: the stream line still says it all */
	}
#else
	(void)fields;
	(void)n_fields;
#endif
	write_line(line, len);
	errno = saved;
}

void pd_log(enum pd_log_level lvl, const char *group, const char *fmt, ...)
{
	if ((int)lvl > max_level)
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(lvl, group, NULL, 0, fmt, ap);
	va_end(ap);
}

void pd_log_fields(enum pd_log_level lvl, const char *group, const char *const *fields, size_t n_fields,
                   const char *fmt, ...)
{
	if ((int)lvl > max_level)
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(lvl, group, fields, n_fields, fmt, ap);
	va_end(ap);
}

/* ---------------------------------------------------------------- */
/* Rate limits */

static pthread_mutex_t limits_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pd_log_limit *limits; /* those that suppressed lines */

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Write the count of rl's last interval (lock held). */
static void limit_report(struct pd_log_limit *rl, uint64_t now)
{
	if (!rl->suppressed)
		return;
	pd_log(rl->lvl, rl->group, "%lu more %s in the last %llu s not logged (at most %u per %u s)",
	       rl->suppressed, rl->what, (unsigned long long)((now - rl->start_ms + 999) / 1000), rl->burst,
	       rl->interval_ms / 1000);
	rl->suppressed = 0;
}

void pd_log_limited(struct pd_log_limit *rl, enum pd_log_level lvl, const char *group, const char *fmt, ...)
{
	if ((int)lvl > max_level)
		return;
	uint64_t now = mono_ms();
	pthread_mutex_lock(&limits_lock);
	if (!rl->start_ms || now - rl->start_ms >= rl->interval_ms) {
		limit_report(rl, now);
		rl->start_ms = now;
		rl->n = 0;
	}
	if (rl->n >= rl->burst) {
		rl->suppressed++;
		rl->lvl = lvl;
		rl->group = group;
		if (!rl->listed) {
			rl->listed = true;
			rl->next = limits;
			limits = rl;
		}
		pthread_mutex_unlock(&limits_lock);
		return;
	}
	rl->n++;
	pthread_mutex_unlock(&limits_lock);
	va_list ap;
	va_start(ap, fmt);
	vlog(lvl, group, NULL, 0, fmt, ap);
	va_end(ap);
}

void pd_log_limits_flush(bool force)
{
	uint64_t now = mono_ms();
	pthread_mutex_lock(&limits_lock);
	for (struct pd_log_limit *rl = limits; rl; rl = rl->next)
		if (rl->suppressed && (force || now - rl->start_ms >= rl->interval_ms)) {
			limit_report(rl, now);
			rl->start_ms = now;
			rl->n = 0;
		}
	pthread_mutex_unlock(&limits_lock);
}
