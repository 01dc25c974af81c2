/* SPDX-License-Identifier: Apache-2.0 */
#include "daemon_proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

const char *kvtd_binary(void)
{
	const char *b = getenv("KVTIERD");

	return b && *b ? b : "kvtierd";
}

static void print_log(const struct kvtd_proc *d)
{
	char line[1024];
	FILE *f = fopen(d->log, "r");

	fprintf(stderr, "---- kvtierd log (%s)\n", d->log);
	while (f && fgets(line, sizeof(line), f))
		fputs(line, stderr);
	if (f)
		fclose(f);
}

int kvtd_start(struct kvtd_proc *d, const char *dir, const char *const *extra)
{
	const char *argv[64];
	char data[300];
	int n = 0;

	if (dir) {
		if (d->dir != dir)
			d->dir = strdup(dir);
	} else {
		d->dir = kvt_test_mkdtemp("kvtierd");
	}
	if (!d->dir)
		return -1;
	if (!d->sockdir && !(d->sockdir = kvt_test_sockdir("kvtd")))
		return -1;
	snprintf(d->socket, sizeof(d->socket), "%s/kvtierd.sock", d->sockdir);
	snprintf(d->log, sizeof(d->log), "%s/kvtierd.log", d->dir);
	snprintf(data, sizeof(data), "%s/data", d->dir);
	argv[n++] = kvtd_binary();
	argv[n++] = "--socket";
	argv[n++] = d->socket;
	argv[n++] = "--data-dir";
	argv[n++] = data;
	argv[n++] = "--dram";
	argv[n++] = "64M";
	argv[n++] = "--ssd";
	argv[n++] = "0";
	argv[n++] = "--metrics";
	argv[n++] = "off";
	argv[n++] = "--log-level";
	argv[n++] = "debug";
	for (int i = 0; extra && extra[i] && n < 62; i++)
		argv[n++] = extra[i];
	/* $KVTD_EXTRA: more arguments, space-separated (the ctest variants that
	 * run a test against another configuration) */
	if (getenv("KVTD_EXTRA")) {
		static char buf[512];
		char *save, *tok;

		snprintf(buf, sizeof(buf), "%s", getenv("KVTD_EXTRA"));
		for (tok = strtok_r(buf, " ", &save); tok && n < 62; tok = strtok_r(NULL, " ", &save))
			argv[n++] = tok;
	}
	argv[n] = NULL;

	d->pid = fork();
	if (d->pid < 0)
		return -1;
	if (d->pid == 0) {
		int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execv(argv[0], (char *const *)argv);
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	/* ready when a connection succeeds */
	for (int i = 0; i < 500; i++) {
		struct kvt_client_opts o;
		struct kvt_client *c;
		int status;

		kvt_client_opts_init(&o, sizeof(o));
		o.socket_path = d->socket;
		if (kvt_client_connect(&o, &c) == 0) {
			kvt_client_close(c);
			return 0;
		}
		if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
			fprintf(stderr, "kvtierd exited early (status %d)\n", status);
			print_log(d);
			d->pid = 0;
			return -1;
		}
		usleep(20000);
	}
	fprintf(stderr, "kvtierd did not come up\n");
	print_log(d);
	return -1;
}

int kvtd_stop(struct kvtd_proc *d, int sig)
{
	int status = 0;

	if (d->pid <= 0)
		return -1;
	kill(d->pid, sig);
	while (waitpid(d->pid, &status, 0) < 0 && errno == EINTR)
		;
	d->pid = 0;
	if (WIFEXITED(status)) {
		if (WEXITSTATUS(status))
			print_log(d);
		return WEXITSTATUS(status);
	}
	return 128 + WTERMSIG(status);
}

int kvtd_wait_exit(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) != pid)
		if (errno != EINTR)
			return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void kvtd_cleanup(struct kvtd_proc *d)
{
	if (d->pid > 0)
		kvtd_stop(d, SIGKILL);
	if (getenv("KVT_TEST_KEEP")) {
		fprintf(stderr, "kept %s\n", d->dir);
	} else {
		kvt_test_rmdir(d->dir);
		if (d->sockdir)
			kvt_test_rmdir(d->sockdir);
	}
	free(d->dir);
	free(d->sockdir);
	d->dir = NULL;
	d->sockdir = NULL;
}

struct kvt_client *kvtd_connect(const struct kvtd_proc *d, const char *token)
{
	struct kvt_client_opts o;
	struct kvt_client *c = NULL;

	kvt_client_opts_init(&o, sizeof(o));
	o.socket_path = d->socket;
	o.token = token ? token : "";
	if (kvt_client_connect(&o, &c))
		return NULL;
	return c;
}

void kvtd_test_desc(struct kvt_ns_desc *d, const char *model)
{
	kvt_client_desc_init(d, sizeof(*d));
	snprintf(d->model_id, sizeof(d->model_id), "%s", model ? model : "test/tiny");
	d->layout = KVT_LAYOUT_PAGED_KV;
	d->dtype = KVT_DTYPE_BF16;
	d->layers = 4;
	d->kv_heads = 2;
	d->head_dim = 16;
	d->block_tokens = 4;
	d->tp_rank = 0;
	d->tp_size = 1;
}

void kvtd_test_desc_128k(struct kvt_ns_desc *d, const char *model)
{
	kvtd_test_desc(d, model);
	d->kv_heads = 4;
	d->head_dim = 128;
	d->block_tokens = 16;
}

static int mem_open(struct engine_mem *m, struct kvt_client *c, const struct kvt_client_ns *ns,
		    const struct kvt_ns_desc *desc, uint32_t pages, bool huge)
{
	struct kvt_client_region r = { .size = sizeof(r) };
	void *map;

	memset(m, 0, sizeof(*m));
	m->layers = desc->layers;
	m->pages = pages;
	m->page_bytes = (uint64_t)desc->block_tokens * desc->kv_heads * desc->head_dim *
			kvt_dtype_bytes(desc->dtype);
	m->page_stride = m->page_bytes;
	m->kv_stride = m->page_bytes * pages;
	m->layer_stride = 2 * m->kv_stride;
	m->bytes = m->layer_stride * m->layers;
	if (huge) {
		m->bytes = (m->bytes + KVT_CLIENT_HUGE_PAGE_BYTES - 1) /
			   KVT_CLIENT_HUGE_PAGE_BYTES * KVT_CLIENT_HUGE_PAGE_BYTES;
		m->fd = kvt_client_memfd_create_huge("test-engine", m->bytes, &map);
	} else {
		m->fd = kvt_client_memfd_create("test-engine", m->bytes, &map);
	}
	if (m->fd < 0)
		return m->fd;
	m->map = map;
	r.memfd = m->fd;
	r.bytes = m->bytes;
	r.layers = m->layers;
	r.pages = pages;
	r.layer_stride = m->layer_stride;
	r.kv_stride = m->kv_stride;
	r.page_stride = m->page_stride;
	m->region = c ? kvt_client_register(c, ns, &r) : 0;
	return m->region < 0 ? m->region : 0;
}

int engine_mem_open(struct engine_mem *m, struct kvt_client *c, const struct kvt_client_ns *ns,
		    const struct kvt_ns_desc *desc, uint32_t pages)
{
	return mem_open(m, c, ns, desc, pages, false);
}

int engine_mem_open_huge(struct engine_mem *m, struct kvt_client *c,
			 const struct kvt_client_ns *ns, const struct kvt_ns_desc *desc,
			 uint32_t pages)
{
	return mem_open(m, c, ns, desc, pages, true);
}

void engine_mem_close(struct engine_mem *m)
{
	if (m->map)
		munmap(m->map, m->bytes);
	if (m->fd > 0)
		close(m->fd);
	m->map = NULL;
	m->fd = -1;
}

uint8_t *engine_page(const struct engine_mem *m, uint32_t page, uint32_t layer, uint32_t kv)
{
	return m->map + layer * m->layer_stride + kv * m->kv_stride + page * m->page_stride;
}

void engine_page_fill(const struct engine_mem *m, uint32_t page, uint64_t seed)
{
	for (uint32_t l = 0; l < m->layers; l++)
		for (uint32_t kv = 0; kv < 2; kv++)
			kvt_test_fill(engine_page(m, page, l, kv), m->page_bytes,
				      seed * 1000003 + l * 2 + kv + 1);
}

int engine_page_check(const struct engine_mem *m, uint32_t page, uint64_t seed)
{
	uint8_t *want = malloc(m->page_bytes);
	int bad = 0;

	for (uint32_t l = 0; l < m->layers && !bad; l++)
		for (uint32_t kv = 0; kv < 2 && !bad; kv++) {
			kvt_test_fill(want, m->page_bytes, seed * 1000003 + l * 2 + kv + 1);
			bad = memcmp(want, engine_page(m, page, l, kv), m->page_bytes) != 0;
		}
	free(want);
	return bad ? -1 : 0;
}

int kvtd_connect_raw(const struct kvtd_proc *d)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (strlen(d->socket) >= sizeof(sa.sun_path)) {
		close(fd);
		return -1;
	}
	memcpy(sa.sun_path, d->socket, strlen(d->socket) + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		close(fd);
		return -1;
	}
	return fd;
}

int kvtd_metrics_port(const struct kvtd_proc *d)
{
	char line[512];
	int port = -1;

	for (int i = 0; i < 200 && port <= 0; i++) {
		FILE *f = fopen(d->log, "r");

		while (f && fgets(line, sizeof(line), f))
			if (sscanf(line, " metrics http://127.0.0.1:%d/metrics", &port) == 1)
				break;
		if (f)
			fclose(f);
		if (port <= 0)
			usleep(10000);
	}
	return port > 0 ? port : -1;
}

char *kvtd_http(int port, const char *req)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	size_t len = 0, cap = 1 << 16;
	char *buf = NULL, *more;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ssize_t n;

	if (fd < 0)
		return NULL;
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) ||
	    send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req) || !(buf = malloc(cap)))
		goto fail;
	while ((n = recv(fd, buf + len, cap - len - 1, 0)) > 0) {
		len += (size_t)n;
		if (cap - len < 4096) {
			more = realloc(buf, cap *= 2);
			if (!more)
				goto fail;
			buf = more;
		}
	}
	buf[len] = 0;
	close(fd);
	return buf;
fail:
	free(buf);
	close(fd);
	return NULL;
}

bool kvtd_log_has(const struct kvtd_proc *d, const char *what)
{
	char line[2048];
	FILE *f = fopen(d->log, "r");
	bool found = false;

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, what) != NULL;
	if (f)
		fclose(f);
	return found;
}

double kvtd_metric(const char *text, const char *series)
{
	const char *p = strstr(text, series);

	while (p && p != text && p[-1] != '\n')
		p = strstr(p + 1, series);
	return p ? strtod(p + strlen(series), NULL) : NAN;
}

int kvtd_chain_open(struct kvtd_chain *e, const struct kvtd_proc *d, const char *model,
		    uint32_t pages, uint32_t n, uint64_t seed)
{
	struct kvt_ns_desc desc;
	uint32_t *tokens = calloc((size_t)n * 16, sizeof(*tokens));
	uint64_t s = seed | 1;
	int err = -ENOMEM;

	memset(e, 0, sizeof(*e));
	e->m.fd = -1;
	e->keys = calloc(n, sizeof(*e->keys));
	if (!tokens || !e->keys)
		goto out;
	err = -ECONNREFUSED;
	e->c = kvtd_connect(d, NULL);
	if (!e->c)
		goto out;
	kvtd_test_desc_128k(&desc, model);
	err = kvt_client_hello(e->c, &desc, &e->ns);
	if (!err)
		err = engine_mem_open(&e->m, e->c, &e->ns, &desc, pages);
	if (err)
		goto out;
	for (uint32_t i = 0; i < n * 16; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&s);
	err = kvt_client_prefix_keys(&e->ns, NULL, tokens, (size_t)n * 16, e->keys, n);
	err = err == (int)n ? 0 : err < 0 ? err : -EIO;
out:
	free(tokens);
	return err;
}

void kvtd_chain_close(struct kvtd_chain *e)
{
	engine_mem_close(&e->m);
	kvt_client_close(e->c);
	free(e->keys);
	memset(e, 0, sizeof(*e));
}
