/* SPDX-License-Identifier: Apache-2.0 */
/* Engine memory registered in parts (REGISTER_PARTS) against a real kvtierd:
 * layers in memfds of their own at unrelated offsets, K and V in either
 * order, saved from one engine and loaded into another laid out otherwise
 * (one buffer, or the old single-part REGISTER), byte for byte; and each
 * malformed list refused with a reason that names the layer. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "daemon_proc.h"
#include "helpers.h"
#include "raw_frames.h"

#define LAYERS 8 /* more memfds than a connection queues without lending */
#define PAGES 16
#define BLOCKS 5
#define MAXP LAYERS

/* Engine memory in parts: each part a memfd, [part offset, + bytes) of it. */
struct parts_mem {
	uint32_t n_parts;
	int fd[MAXP];
	uint8_t *map[MAXP];
	uint64_t fd_bytes[MAXP];
	struct kvt_client_part part[MAXP];
	struct kvt_client_layer layer[LAYERS];
	uint64_t kv_stride, page_stride;
	int region;
};

struct fx {
	struct kvtd_proc d;
	struct kvt_ns_desc desc;
	uint64_t page; /* bytes of one page of one layer's K (or V) */
	uint64_t seed;
};

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f || kvtd_start(&f->d, NULL, NULL))
		return -1;
	kvtd_test_desc(&f->desc, "test/parts");
	f->desc.layers = LAYERS;
	f->page = (uint64_t)f->desc.block_tokens * f->desc.kv_heads * f->desc.head_dim * 2;
	f->seed = kvt_test_seed() | 1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (kvtd_stop(&f->d, SIGTERM) != 0)
		fprintf(stderr, "kvtierd did not exit cleanly\n");
	kvtd_cleanup(&f->d);
	free(f);
	return 0;
}

static struct kvt_client *engine(struct fx *f, struct kvt_client_ns *ns)
{
	struct kvt_client *c = kvtd_connect(&f->d, NULL);

	assert_non_null(c);
	assert_int_equal(kvt_client_hello(c, &f->desc, ns), 0);
	return c;
}

/* Part i: a memfd of `bytes` from `offset` (the file holds offset + bytes). */
static void part_make(struct parts_mem *m, uint32_t i, uint64_t offset, uint64_t bytes)
{
	void *map;

	m->fd_bytes[i] = offset + bytes;
	m->fd[i] = kvt_client_memfd_create("parts", m->fd_bytes[i], &map);
	assert_true(m->fd[i] >= 0);
	m->map[i] = map;
	m->part[i] = (struct kvt_client_part){ .memfd = m->fd[i], .offset = offset, .bytes = bytes };
	m->n_parts = i + 1 > m->n_parts ? i + 1 : m->n_parts;
}

static void parts_close(struct parts_mem *m)
{
	for (uint32_t i = 0; i < m->n_parts; i++) {
		munmap(m->map[i], m->fd_bytes[i]);
		close(m->fd[i]);
	}
}

/* Bytes of a layer from its offset: its last V page's end. */
static uint64_t layer_span(const struct fx *f, const struct parts_mem *m)
{
	return m->kv_stride + (PAGES - 1) * m->page_stride + f->page;
}

/* Every layer in a memfd of its own, at offsets that follow no rule, K and V
 * interleaved per page (FlashInfer: [pages][K,V][page]). */
static void per_layer_memfds(struct fx *f, struct parts_mem *m)
{
	memset(m, 0, sizeof(*m));
	m->kv_stride = f->page;
	m->page_stride = 2 * f->page;
	for (uint32_t l = 0; l < LAYERS; l++) {
		uint64_t at = 64 * ((l * 331u) % 7u) + 128;

		part_make(m, l, (l % 2) * 4096u, at + layer_span(f, m) + 100u * l);
		m->layer[l] = (struct kvt_client_layer){ .part = l, .offset = at };
	}
}

/* One memfd, K then V (FlashAttention: [K,V][pages][page]), the layers in
 * another order than their numbers and with gaps between them. */
static void one_buffer(struct fx *f, struct parts_mem *m)
{
	uint64_t slot;

	memset(m, 0, sizeof(*m));
	m->kv_stride = PAGES * f->page;
	m->page_stride = f->page;
	slot = layer_span(f, m) + 192;
	part_make(m, 0, 0, LAYERS * slot);
	for (uint32_t l = 0; l < LAYERS; l++)
		m->layer[l] = (struct kvt_client_layer){ .part = 0,
							 .offset = ((l * 3u + 1u) % LAYERS) * slot };
}

static int parts_register(struct kvt_client *c, const struct kvt_client_ns *ns,
			  struct parts_mem *m, char *why, size_t why_len)
{
	struct kvt_client_parts p = {
		.size = sizeof(p), .n_parts = m->n_parts, .parts = m->part, .layers = LAYERS,
		.pages = PAGES, .layer = m->layer, .kv_stride = m->kv_stride,
		.page_stride = m->page_stride, .why = why, .why_len = why_len,
	};

	m->region = kvt_client_register_parts(c, ns, &p);
	return m->region;
}

static uint8_t *pm_page(const struct parts_mem *m, uint32_t page, uint32_t layer, uint32_t kv)
{
	const struct kvt_client_layer *y = &m->layer[layer];

	return m->map[y->part] + m->part[y->part].offset + y->offset + kv * m->kv_stride +
	       (uint64_t)page * m->page_stride;
}

static void fill(struct fx *f, const struct parts_mem *m, const uint32_t *pages)
{
	for (int b = 0; b < BLOCKS; b++)
		for (uint32_t l = 0; l < LAYERS; l++)
			for (uint32_t kv = 0; kv < 2; kv++) {
				uint8_t *p = pm_page(m, pages[b], l, kv);

				for (uint64_t i = 0; i < f->page; i++)
					p[i] = (uint8_t)kvt_test_rand(&f->seed);
			}
}

static void make_keys(struct fx *f, const struct kvt_client_ns *ns, struct kvt_key *keys)
{
	uint32_t tokens[BLOCKS * 4];

	for (uint32_t i = 0; i < BLOCKS * f->desc.block_tokens; i++)
		tokens[i] = (uint32_t)kvt_test_rand(&f->seed);
	assert_int_equal(kvt_client_prefix_keys(ns, NULL, tokens, BLOCKS * f->desc.block_tokens,
						keys, BLOCKS), BLOCKS);
}

static void xfer(struct kvt_client *c, const struct kvt_client_ns *ns, int region, bool save,
		 const struct kvt_key *keys, const uint32_t *pages)
{
	uint64_t ticket;

	assert_int_equal(save ? kvt_client_save(c, ns, (uint32_t)region, NULL, keys, pages,
						BLOCKS, &ticket)
			      : kvt_client_load(c, ns, (uint32_t)region, keys, pages, BLOCKS,
						&ticket), 0);
	assert_int_equal(kvt_client_wait(c, ticket, -1), BLOCKS);
}

/* Save from `from` (pages fp), load into `to` (pages tp), compare. */
static void across(struct fx *f, struct kvt_client *cf, const struct kvt_client_ns *nf,
		   const struct parts_mem *from, struct kvt_client *ct,
		   const struct kvt_client_ns *nt, const struct parts_mem *to)
{
	const uint32_t fp[BLOCKS] = { 3, 11, 0, 7, 15 }, tp[BLOCKS] = { 9, 2, 14, 5, 1 };
	struct kvt_key keys[BLOCKS];

	make_keys(f, nf, keys);
	fill(f, from, fp);
	xfer(cf, nf, from->region, true, keys, fp);
	xfer(ct, nt, to->region, false, keys, tp);
	for (int b = 0; b < BLOCKS; b++)
		for (uint32_t l = 0; l < LAYERS; l++)
			for (uint32_t kv = 0; kv < 2; kv++)
				assert_memory_equal(pm_page(to, tp[b], l, kv),
						    pm_page(from, fp[b], l, kv), f->page);
}

/* The old REGISTER's paged memory (daemon_proc.c) seen as one part. */
static void old_as_parts(const struct engine_mem *e, struct parts_mem *m)
{
	memset(m, 0, sizeof(*m));
	m->n_parts = 1;
	m->map[0] = e->map;
	m->kv_stride = e->kv_stride;
	m->page_stride = e->page_stride;
	m->region = e->region;
	for (uint32_t l = 0; l < LAYERS; l++)
		m->layer[l] = (struct kvt_client_layer){ 0, l * e->layer_stride };
}

static void test_parts_save_load_across_layouts(void **state)
{
	struct fx *f = *state;
	struct kvt_client_ns na, nb, nc;
	struct kvt_client *a = engine(f, &na), *b = engine(f, &nb), *c = engine(f, &nc);
	struct parts_mem pa, pb, pc;
	struct engine_mem old;
	char why[256] = "";

	per_layer_memfds(f, &pa);
	one_buffer(f, &pb);
	assert_true(parts_register(a, &na, &pa, why, sizeof(why)) > 0);
	assert_true(parts_register(b, &nb, &pb, why, sizeof(why)) > 0);
	assert_int_equal(engine_mem_open(&old, c, &nc, &f->desc, PAGES), 0);
	old_as_parts(&old, &pc);

	across(f, a, &na, &pa, b, &nb, &pb); /* per-layer memfds -> one buffer */
	across(f, b, &nb, &pb, a, &na, &pa); /* and back */
	across(f, a, &na, &pa, c, &nc, &pc); /* into the old REGISTER's memory */
	across(f, c, &nc, &pc, a, &na, &pa); /* from it */

	kvt_client_close(a);
	kvt_client_close(b);
	kvt_client_close(c);
	engine_mem_close(&old);
	parts_close(&pa);
	parts_close(&pb);
}

/* Register m, expect -EINVAL with a reason holding each of want[]. */
static void refused(struct kvt_client *c, const struct kvt_client_ns *ns, struct parts_mem *m,
		    const char *const *want)
{
	char why[320] = "unset";

	assert_int_equal(parts_register(c, ns, m, why, sizeof(why)), -EINVAL);
	fprintf(stderr, "refused: %s\n", why);
	for (; *want; want++)
		assert_non_null(strstr(why, *want));
}

static void test_parts_malformed_refused_named(void **state)
{
	struct fx *f = *state;
	struct kvt_client_ns ns;
	struct kvt_client *c = engine(f, &ns);
	struct parts_mem m;
	char ok_why[64];

	/* layer 5 ends one byte past its part */
	per_layer_memfds(f, &m);
	m.layer[5].offset = m.part[5].bytes - layer_span(f, &m) + 1;
	refused(c, &ns, &m, (const char *const[]){ "layer 5", "past part 5", "page_stride",
						    NULL });
	parts_close(&m);

	/* pages of a layer overlap: page_stride shorter than a page */
	one_buffer(f, &m);
	m.page_stride = f->page / 2;
	refused(c, &ns, &m, (const char *const[]){ "layer 0", "page_stride", "overlap", NULL });
	/* V on K: kv_stride one page, pages one page apart */
	m.page_stride = f->page;
	m.kv_stride = f->page;
	refused(c, &ns, &m, (const char *const[]){ "layer 0", "kv_stride", NULL });
	/* layer 6 starts a quarter page into layer 2's pages */
	m.kv_stride = PAGES * f->page;
	m.layer[6].offset = m.layer[2].offset + f->page / 4;
	refused(c, &ns, &m, (const char *const[]){ "overlaps layer", "layer 2", "layer 6", NULL });
	parts_close(&m);

	/* a part index out of range */
	per_layer_memfds(f, &m);
	m.layer[3].part = 9;
	refused(c, &ns, &m, (const char *const[]){ "layer 3", "part 9 out of range", NULL });
	/* and the daemon still takes a good list on the same connection */
	m.layer[3].part = 3;
	assert_true(parts_register(c, &ns, &m, ok_why, sizeof(ok_why)) > 0);
	parts_close(&m);
	kvt_client_close(c);
}

/* Interleaved layouts that do not overlap are taken: two layers woven into
 * one another's gaps, K and V a page apart in pages two apart. */
static void test_parts_interleaved_layers_taken(void **state)
{
	struct fx *f = *state;
	struct kvt_client_ns ns;
	struct kvt_client *c = engine(f, &ns);
	struct parts_mem m;

	memset(&m, 0, sizeof(m));
	m.kv_stride = f->page;
	m.page_stride = 2 * f->page * LAYERS; /* [pages][layers][K,V][page] */
	part_make(&m, 0, 0, PAGES * m.page_stride);
	for (uint32_t l = 0; l < LAYERS; l++)
		m.layer[l] = (struct kvt_client_layer){ 0, 2 * f->page * l };
	assert_true(parts_register(c, &ns, &m, NULL, 0) > 0);
	parts_close(&m);
	kvt_client_close(c);
}

/* A raw connection (version 4): HELLO, then a REGISTER_PARTS of
 * KVT_PROTO_MAX_PARTS parts of `bytes` (layer l in part l) encoded into w,
 * to be sent with send_with_fds. Returns the socket. */
static int raw_parts_conn(struct fx *f, uint64_t bytes, struct kvt_wr *w)
{
	static struct kvt_region_part parts[KVT_PROTO_MAX_PARTS];
	struct kvt_region_layer layer[LAYERS];
	struct kvt_rep_hello hello;
	struct kvt_frame_hdr h;
	struct kvt_region r;
	int fd = kvtd_connect_raw(&f->d);
	uint8_t *p;

	assert_true(fd >= 0);
	kvt_wr_init(w);
	assert_int_equal(kvt_proto_enc_hello(w, 1, "", &f->desc), 0);
	raw_send(fd, w);
	raw_read(fd, &h, &p);
	assert_int_equal(h.status, 0);
	assert_int_equal(kvt_proto_rep_hello(p, h.len, &hello), 0);
	assert_int_equal(hello.version, 4);
	free(p);
	for (uint32_t i = 0; i < KVT_PROTO_MAX_PARTS; i++)
		parts[i] = (struct kvt_region_part){ 0, bytes, NULL };
	for (uint32_t l = 0; l < LAYERS; l++)
		layer[l] = (struct kvt_region_layer){ l, 0 };
	r = (struct kvt_region){ .ns = hello.ns, .kind = KVT_MEM_HOST_MEMFD, .layers = LAYERS,
				 .pages = PAGES, .n_parts = KVT_PROTO_MAX_PARTS,
				 .kv_stride = PAGES * f->page, .page_stride = f->page,
				 .parts = parts, .layer = layer };
	assert_int_equal(kvt_proto_enc_register_parts(w, 2, &r), 0);
	return fd;
}

/* Send buf[0..len) of a frame, with the part memfds on its first byte. */
static void send_with_fds(int fd, const uint8_t *buf, size_t len, int memfd)
{
	union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * KVT_PROTO_MAX_PARTS)]; } ctl;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
			      .msg_controllen = sizeof(ctl.b) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	int fds[KVT_PROTO_MAX_PARTS];

	for (uint32_t i = 0; i < KVT_PROTO_MAX_PARTS; i++)
		fds[i] = memfd;
	memset(&ctl, 0, sizeof(ctl));
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(fds));
	memcpy(CMSG_DATA(cm), fds, sizeof(fds));
	assert_int_equal(sendmsg(fd, &msg, MSG_NOSIGNAL), (ssize_t)len);
}

static int32_t reply_status(int fd)
{
	struct kvt_frame_hdr h;
	uint8_t *p;

	raw_read(fd, &h, &p);
	free(p);
	return h.status;
}

/* Memfds past a connection's own 4 are lent from its uid's share (256): two
 * connections holding REGISTER_PARTS frames of 128 memfds, still unsent past
 * their first byte, leave a third too few, which gets -EAGAIN; once their
 * frames are done the memfds are given back and the third registers. */
static void test_parts_fd_budget_lent_and_given_back(void **state)
{
	struct fx *f = *state;
	uint64_t bytes = 2 * PAGES * f->page;
	struct kvt_wr w[3];
	struct kvt_client *sync = kvtd_connect(&f->d, NULL);
	void *map;
	int memfd = kvt_client_memfd_create("budget", bytes, &map), fd[3];

	assert_true(memfd >= 0 && sync);
	for (int i = 0; i < 3; i++)
		fd[i] = raw_parts_conn(f, bytes, &w[i]);
	for (int i = 0; i < 2; i++)
		send_with_fds(fd[i], w[i].buf, 1, memfd);
	/* the daemon has read both before it answers a later PING */
	assert_int_equal(kvt_client_ping(sync, "x", 1), 0);
	send_with_fds(fd[2], w[2].buf, w[2].len, memfd);
	assert_int_equal(reply_status(fd[2]), -EAGAIN);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(send(fd[i], w[i].buf + 1, w[i].len - 1, MSG_NOSIGNAL),
				 (ssize_t)w[i].len - 1);
		assert_int_equal(reply_status(fd[i]), 0);
	}
	send_with_fds(fd[2], w[2].buf, w[2].len, memfd);
	assert_int_equal(reply_status(fd[2]), 0);
	for (int i = 0; i < 3; i++) {
		kvt_wr_free(&w[i]);
		close(fd[i]);
	}
	kvt_client_close(sync);
	munmap(map, bytes);
	close(memfd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_parts_save_load_across_layouts, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_parts_malformed_refused_named, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_parts_interleaved_layers_taken, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_parts_fd_budget_lent_and_given_back, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
