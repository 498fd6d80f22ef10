/* SPDX-License-Identifier: MIT */
/*
 * Replays fuzz inputs without libFuzzer: every file named on the command
 * line (directories are walked one level), then a fixed set of pseudo-random
 * inputs, so the target runs as an ordinary test under the sanitizers.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	uint8_t *buf = malloc(1 << 20);
	size_t n = buf ? fread(buf, 1, 1 << 20, f) : 0;
	fclose(f);
	if (!buf)
		return -1;
	LLVMFuzzerTestOneInput(buf, n);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int files = 0;
	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			fprintf(stderr, "%s: cannot stat\n", argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			files += run_file(argv[i]) == 0;
			continue;
		}
		DIR *dir = opendir(argv[i]);
		struct dirent *e;
		while (dir && (e = readdir(dir))) {
			if (e->d_name[0] == '.')
				continue;
			char path[4096];
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			files += run_file(path) == 0;
		}
		if (dir)
			closedir(dir);
	}
	/* Deterministic noise, biased towards plausible headers. */
	uint32_t s = 0x12345678;
	uint8_t buf[4096];
	for (int iter = 0; iter < 20000; iter++) {
		size_t n = 2 + (size_t)(iter * 131) % (sizeof(buf) - 2);
		for (size_t k = 0; k < n; k++) {
			s = s * 1664525u + 1013904223u;
			buf[k] = (uint8_t)(s >> 24);
		}
		if (iter % 3 == 0 && n > 11) {
			static const uint8_t types[] = { 0x01, 0x02, 0x10, 0x11, 0x20, 0x21, 0x23 };
			uint32_t len = (uint32_t)((n - 11) % 600);
			buf[2] = (uint8_t)(len >> 24); buf[3] = (uint8_t)(len >> 16);
			buf[4] = (uint8_t)(len >> 8); buf[5] = (uint8_t)len;
			buf[6] = types[iter % 7];
			memset(buf + 7, 0, 4);
			if (buf[6] != 0x01 && buf[6] != 0x02)
				buf[10] = 1;
		}
		LLVMFuzzerTestOneInput(buf, n);
	}
	printf("replayed %d corpus files and 20000 generated inputs\n", files);
	return 0;
}
