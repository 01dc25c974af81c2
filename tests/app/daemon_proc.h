/* SPDX-License-Identifier: Apache-2.0 */
/* Integration-test helpers: run the real kvtierd as a child process, and an
 * engine-like fixture (paged KV memory in a sealed memfd, registered). */
#ifndef KVT_TESTS_SIDECAR_DAEMON_PROC_H
#define KVT_TESTS_SIDECAR_DAEMON_PROC_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvtier/client.h"

struct kvtd_proc {
	pid_t pid;
	char *dir;          /* temp dir: data dir, log */
	char *sockdir;      /* short temp dir under /tmp: the socket */
	char socket[256];
	char log[PATH_MAX];  /* dir may be deep */
};

/* Path of the kvtierd binary: $KVTIERD (set by CMake). */
const char *kvtd_binary(void);

/* Start kvtierd with the data dir in a fresh temp dir and the socket in a
 * short one under /tmp (kvt_test_sockdir), plus `extra` arguments
 * (NULL-terminated) and those of $KVTD_EXTRA, and wait until it accepts
 * connections.
 * Returns 0 or -1 (the log is printed). If dir is not NULL, reuse it; a
 * d->sockdir already set (a restart) is reused too. */
int kvtd_start(struct kvtd_proc *d, const char *dir, const char *const *extra);

/* Send sig and wait for the exit; returns the exit status (128+sig if killed). */
int kvtd_stop(struct kvtd_proc *d, int sig);

/* Wait for child pid to end: its exit status, 128 + the signal that killed
 * it, or -1 when pid is not a child of this process. */
int kvtd_wait_exit(pid_t pid);

/* Remove the temp dirs. */
void kvtd_cleanup(struct kvtd_proc *d);

/* Connect with token (NULL = none). */
struct kvt_client *kvtd_connect(const struct kvtd_proc *d, const char *token);

/* A plain socket connected to the daemon, for tests that speak raw frames;
 * -1 on failure. */
int kvtd_connect_raw(const struct kvtd_proc *d);

/* Whether a line of d's log holds `what`. */
bool kvtd_log_has(const struct kvtd_proc *d, const char *what);

/* The metrics endpoint's TCP port on 127.0.0.1, read from the start
 * summary in d's log (it may trail the socket): -1 if none within 2 s. */
int kvtd_metrics_port(const struct kvtd_proc *d);

/* Send req to 127.0.0.1:port and return the whole answer (malloc'd, NUL
 * terminated); NULL when the connection or the send fails. */
char *kvtd_http(int port, const char *req);

/* The value of the line of Prometheus text that starts with series; NAN
 * when there is none. */
double kvtd_metric(const char *text, const char *series);

/* A small model for tests: 4 layers, 2 KV heads, head_dim 16, bf16, 4 tokens
 * per block = 2 KiB blocks. */
void kvtd_test_desc(struct kvt_ns_desc *desc, const char *model);

/* kvtd_test_desc with 4 KV heads of 128 dims and 16 tokens: 128 KiB blocks,
 * 64 to the 8 MiB DRAM tier the SSD tests give the daemon. */
void kvtd_test_desc_128k(struct kvt_ns_desc *desc, const char *model);

/* Engine memory: `pages` pages in the paged layout of desc
 * [layer][2][pages][page_bytes], in a sealed memfd, registered with the daemon. */
struct engine_mem {
	int fd;
	uint8_t *map;
	uint64_t bytes, page_bytes;
	uint32_t layers, pages;
	uint64_t layer_stride, kv_stride, page_stride;
	int region;
};

int engine_mem_open(struct engine_mem *m, struct kvt_client *c, const struct kvt_client_ns *ns,
		    const struct kvt_ns_desc *desc, uint32_t pages);
/* The same in explicit 2 MiB huge pages (its bytes rounded up to them). */
int engine_mem_open_huge(struct engine_mem *m, struct kvt_client *c,
			 const struct kvt_client_ns *ns, const struct kvt_ns_desc *desc,
			 uint32_t pages);
void engine_mem_close(struct engine_mem *m);
uint8_t *engine_page(const struct engine_mem *m, uint32_t page, uint32_t layer, uint32_t kv);
/* Fill page with bytes derived from seed; check returns 0 when they match. */
void engine_page_fill(const struct engine_mem *m, uint32_t page, uint64_t seed);
int engine_page_check(const struct engine_mem *m, uint32_t page, uint64_t seed);

/* An engine of the SSD tests: a connection to d, the namespace of
 * kvtd_test_desc_128k(model), engine memory of `pages` pages, and the keys of
 * one chain of n blocks of 16 random tokens each from seed. Returns 0 or
 * -errno; kvtd_chain_close takes what it holds. */
struct kvtd_chain {
	struct kvt_client *c;
	struct kvt_client_ns ns;
	struct engine_mem m;
	struct kvt_key *keys;
};

int kvtd_chain_open(struct kvtd_chain *e, const struct kvtd_proc *d, const char *model,
		    uint32_t pages, uint32_t n, uint64_t seed);
void kvtd_chain_close(struct kvtd_chain *e);

#endif
