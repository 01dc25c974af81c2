/* SPDX-License-Identifier: Apache-2.0 */
/* kvtier — the engine-side client of kvtierd (libkvtier-client.so).
 *
 * An engine connects to the daemon's Unix socket, says HELLO with its tenant
 * token and the namespace of its KV cache (model, layout, dtype, block size),
 * registers its paged KV memory once, and then moves blocks by prefix key:
 * LOOKUP which leading blocks kvtier holds, SAVE engine pages into kvtier,
 * LOAD blocks back into engine pages. SAVE and LOAD return a ticket at once;
 * kvt_client_wait (or _poll) gives the result, and a LOAD can be waited on
 * layer by layer. By default the daemon pushes each ticket's completion (and
 * each LOAD layer's) as it happens, so these waits cost no round trip; with
 * KVT_CLIENT_WAITED, or a daemon of protocol version 1, each is a WAIT
 * (POLL) round trip.
 *
 * A connection may be shared by threads: calls are matched to their replies
 * by request id, so a thread waiting on a long LOAD does not hold up another's
 * LOOKUP. Every function returns 0 (or a count) or a negative errno; the
 * errors each call adds are listed above it. Common to all calls:
 * -EINVAL (bad argument), -ECONNRESET (the daemon closed the connection; the
 * connection is then unusable), -EBADMSG (a reply that does not parse),
 * -EPERM (a call before a successful hello). */
#ifndef KVTIER_CLIENT_H
#define KVTIER_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "kvtier/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVT_CLIENT_DEFAULT_SOCKET "/run/kvtier/kvtierd.sock"

struct kvt_client;

/* How a connection learns that a SAVE or LOAD, or a LOAD's layer, is done. */
enum kvt_client_completions {
	KVT_CLIENT_PUSHED = 0, /* the daemon pushes a frame per ticket and as a
	                        * LOAD's layers land (layers within 100 us share
	                        * one); waits read them (a daemon of protocol 1:
	                        * as WAITED) */
	KVT_CLIENT_WAITED = 1, /* each wait is a WAIT (poll a POLL) round trip */
};

struct kvt_client_opts {
	size_t size;             /* sizeof(struct kvt_client_opts), set by _init */
	const char *socket_path; /* default $KVTIER_SOCKET, else kvtierd's default:
	                          * KVT_CLIENT_DEFAULT_SOCKET as root,
	                          * /tmp/kvtier-UID/kvtierd.sock otherwise */
	const char *token;       /* tenant token; default $KVTIER_TOKEN or "" */
	enum kvt_client_completions completions; /* default KVT_CLIENT_PUSHED */
};

/* Fill opts with the defaults as far as size_bytes reaches; see "Versioned
 * structs" in types.h. */
void kvt_client_opts_init(struct kvt_client_opts *opts, size_t size_bytes);

/* The socket path kvt_client_connect(opts) connects to: opts->socket_path,
 * else $KVTIER_SOCKET, else kvtierd's default for this user (opts may be
 * NULL). Written to buf (at most len bytes, NUL-terminated); returns buf.
 * For messages: a failed connect names the path it tried. */
const char *kvt_client_socket_path(const struct kvt_client_opts *opts, char *buf, size_t len);

/* Connect to kvtierd. Returns 0 and *out, or the errno of socket/connect
 * (-ENOENT: no socket there, -ECONNREFUSED: no daemon behind it, -EACCES:
 * not allowed by the socket's mode, -ENAMETOOLONG: a path of 108 bytes or
 * more). kvt_client_socket_path() names the path tried. The opts strings
 * are copied. */
int kvt_client_connect(const struct kvt_client_opts *opts, struct kvt_client **out);

/* Close the connection; the daemon finishes or cancels what was in flight and
 * frees what the connection held. NULL is accepted. */
void kvt_client_close(struct kvt_client *c);

/* The same as kvt_ns_desc_init (types.h), which libkvtier-client exports
 * too; kept for engines written against kvtier 0.1. */
void kvt_client_desc_init(struct kvt_ns_desc *desc, size_t size_bytes);

/* A namespace as the daemon granted it. */
struct kvt_client_ns {
	uint32_t handle;
	uint64_t block_bytes;    /* bytes of one block */
	struct kvt_key salt;     /* mixed into this namespace's prefix keys */
	uint32_t block_tokens;
	uint32_t max_keys;       /* most keys one request may carry */
};

/* Open (or join) the namespace of desc under this connection's tenant. desc's
 * tenant_salt is ignored: the daemon salts per tenant. Errors: -EACCES (wrong
 * token, or a model the tenant may not use), -EPROTONOSUPPORT, -EFBIG,
 * -EMFILE (16 namespaces per connection), -EDQUOT (the tenant has as many
 * namespaces holding blocks as its quota allows), -ENOSPC (the daemon's
 * store holds all the namespaces it can). */
int kvt_client_hello(struct kvt_client *c, const struct kvt_ns_desc *desc,
		     struct kvt_client_ns *out);

/* Prefix keys of the full blocks of tokens under ns (see kvt_prefix_keys):
 * parent is the key of the block before tokens[0], NULL from the start.
 * Returns the number of keys written. */
int kvt_client_prefix_keys(const struct kvt_client_ns *ns, const struct kvt_key *parent,
			   const uint32_t *tokens, size_t n_tokens,
			   struct kvt_key *keys, size_t max_keys);

/* The engine's paged KV memory: page p of layer l starts at
 *   offset + l*layer_stride + p*page_stride      (K, or the MLA latent)
 * and its V at + kv_stride (0 for MLA). A page holds block_tokens tokens of
 * one layer, so a block is `layers` pages (x2 with V). */
struct kvt_client_region {
	size_t size;             /* sizeof(struct kvt_client_region); an older,
	                          * smaller size leaves the fields past it 0 */
	int memfd;               /* host backend: a memfd sealed with F_SEAL_SHRINK;
	                          * -1 for GPU memory named by cuda_ipc */
	uint64_t bytes;          /* bytes of the region from offset */
	uint64_t offset;
	uint32_t layers, pages;
	uint64_t layer_stride, kv_stride, page_stride;
	/* GPU: the cudaIpcMemHandle_t of the allocation holding the KV pool
	 * (offset and bytes inside it), when memfd is -1 */
	const void *cuda_ipc;
	uint32_t cuda_ipc_len;   /* <= 64 */
	uint32_t device;         /* the engine's CUDA device ordinal */
};

/* Register engine memory for ns; a memfd is passed to the daemon (the caller
 * keeps its own), a CUDA IPC handle is opened by the daemon's GPU. Returns a
 * region handle (> 0), or -EPERM (memfd not sealed), -EINVAL (layout outside
 * the region or not the namespace's), -EBADF (unknown ns), -EMFILE (16
 * regions per connection), -EOPNOTSUPP (CUDA memory, and the daemon drives no
 * GPU), -EFAULT (the daemon cannot open the IPC handle). */
int kvt_client_register(struct kvt_client *c, const struct kvt_client_ns *ns,
			const struct kvt_client_region *region);

/* One allocation of engine memory for kvt_client_register_parts: the part
 * is [offset, offset + bytes) of the memfd, or of the CUDA allocation. */
struct kvt_client_part {
	int memfd;               /* host: a memfd sealed with F_SEAL_SHRINK; -1 for
	                          * GPU memory named by cuda_ipc */
	uint64_t offset, bytes;
	const void *cuda_ipc;    /* GPU: the cudaIpcMemHandle_t of the allocation
	                          * (cuda_ipc_len bytes) */
};

/* Where a layer lies: in part `part`, its page 0 `offset` bytes from the
 * part's start. */
struct kvt_client_layer {
	uint32_t part;
	uint64_t offset;
};

/* Engine KV memory in several parts (one per allocation: a tensor per layer,
 * or any grouping): page p of layer l starts at
 *   layer[l].offset + p*page_stride        in part layer[l].part
 * and its V at + kv_stride (0 for MLA); the strides are common to the
 * layers, so FlashAttention's [2, blocks, ...] (kv_stride = blocks x page,
 * page_stride = page) and FlashInfer's [blocks, 2, ...] (kv_stride = page,
 * page_stride = 2 x page) are both one description. */
struct kvt_client_parts {
	size_t size;             /* sizeof(struct kvt_client_parts); an older,
	                          * smaller size leaves the fields past it 0 */
	uint32_t n_parts;        /* 1 to 128; all memfds or all CUDA */
	const struct kvt_client_part *parts;
	uint32_t layers, pages;
	const struct kvt_client_layer *layer; /* `layers` entries */
	uint64_t kv_stride, page_stride;
	uint32_t cuda_ipc_len;   /* GPU: bytes of each handle (<= 64) */
	uint32_t device;         /* GPU: the engine's CUDA device ordinal */
	char *why;               /* optional: on -EINVAL for the layout, the
	                          * daemon's reason naming the layer and the
	                          * stride or part at fault (NUL-terminated) */
	size_t why_len;
};

/* Register engine memory in parts for ns: the memfds go to the daemon in one
 * message (the caller keeps its own), CUDA handles are opened by the
 * daemon's GPU. The daemon checks every layer: inside its part, no page of
 * the region on another within a part. Returns a region handle (> 0), or
 * -EINVAL (a layout the daemon refuses: its reason in why; or parts, layers
 * or kinds out of range here), -EOPNOTSUPP (a daemon older than protocol
 * version 4, or CUDA memory and no GPU there), -EAGAIN (the daemon is over
 * its budget of passed fds: try again), and kvt_client_register's other
 * errors. */
int kvt_client_register_parts(struct kvt_client *c, const struct kvt_client_ns *ns,
			      const struct kvt_client_parts *parts);

/* Create a sealed memfd of bytes and map it; for engines (and tests) without
 * memory of their own. Returns the fd and *map, or -errno. Unmap with munmap. */
int kvt_client_memfd_create(const char *name, uint64_t bytes, void **map);

/* Explicit huge pages (hugetlbfs) of this size back the memfd of
 * kvt_client_memfd_create_huge. */
#define KVT_CLIENT_HUGE_PAGE_BYTES (2ull << 20)

/* kvt_client_memfd_create in explicit 2 MiB huge pages (bytes a multiple
 * of KVT_CLIENT_HUGE_PAGE_BYTES, else -EINVAL; -ENOMEM when too few are
 * reserved, see /proc/sys/vm/nr_hugepages). Blocks the daemon reads
 * straight from SSD into such memory go to the device as one request each,
 * where 4 KiB pages cut a block into many. */
int kvt_client_memfd_create_huge(const char *name, uint64_t bytes, void **map);

/* The longest stored prefix of keys[0..n): returns the count of leading keys
 * stored; tiers[i] (when not NULL) receives each key's tier (enum kvt_tier,
 * KVT_TIER_NONE past the prefix). -EBADF for an unknown ns, -E2BIG for n over
 * ns->max_keys. */
int kvt_client_lookup(struct kvt_client *c, const struct kvt_client_ns *ns,
		      const struct kvt_key *keys, uint32_t n, uint8_t *tiers);

/* kvt_client_lookup with the daemon's plan: *load receives how many of the
 * stored leading keys the engine should load; past them, recomputing is
 * faster on this machine (the daemon measures what each tier delivers and
 * takes the speed kvt_client_prefill reports). A daemon of protocol 1 plans
 * nothing: *load is the stored count. */
int kvt_client_lookup_plan(struct kvt_client *c, const struct kvt_client_ns *ns,
			   const struct kvt_key *keys, uint32_t n, uint8_t *tiers,
			   uint32_t *load);

/* Tell the daemon the engine's prefill speed for ns: it computed the prefill
 * of `tokens` tokens in ns_elapsed nanoseconds (time waiting for loads left
 * out). LOOKUP's plan compares it with what the tiers deliver. Returns 0,
 * -EBADF (unknown ns), -EOPNOTSUPP (a daemon of protocol 1). */
int kvt_client_prefill(struct kvt_client *c, const struct kvt_client_ns *ns, uint32_t tokens,
		       uint64_t ns_elapsed);

/* The protocol version the daemon agreed on at the last HELLO (1 to 3), 0
 * before one. */
int kvt_client_version(const struct kvt_client *c);

/* Start saving engine pages[i] as block keys[i] (keys a prefix chain that
 * continues parent; NULL when keys[0] starts a sequence). Returns 0 and
 * *ticket; kvt_client_wait gives the number of leading keys stored after it.
 * -EBADF (unknown ns or region), -ERANGE (page id outside the region),
 * -EBUSY (too many tickets open). */
int kvt_client_save(struct kvt_client *c, const struct kvt_client_ns *ns, uint32_t region,
		    const struct kvt_key *parent, const struct kvt_key *keys,
		    const uint32_t *pages, uint32_t n, uint64_t *ticket);

/* kvt_client_save with a reuse-class hint for the blocks (kvtier/types.h:
 * 0 = none, up to KVT_REUSE_CLASS_MAX; the reference one is
 * kvt_reuse_class_of(the request's output tokens)), which the daemon's
 * eviction policy may learn from ("class-lru"). A block already stored
 * keeps its class. A daemon of protocol 1 or 2 is not told the class (it
 * is a hint): the save goes on without it. Errors as kvt_client_save, and
 * -EINVAL for a class over KVT_REUSE_CLASS_MAX. */
int kvt_client_save_class(struct kvt_client *c, const struct kvt_client_ns *ns,
			  uint32_t region, const struct kvt_key *parent,
			  const struct kvt_key *keys, const uint32_t *pages, uint32_t n,
			  unsigned reuse_class, uint64_t *ticket);

/* Start loading blocks keys[i] into engine pages[i]. Returns 0 and *ticket;
 * kvt_client_wait gives the number of leading blocks loaded (a miss ends
 * them). Errors as kvt_client_save. */
int kvt_client_load(struct kvt_client *c, const struct kvt_client_ns *ns, uint32_t region,
		    const struct kvt_key *keys, const uint32_t *pages, uint32_t n,
		    uint64_t *ticket);

/* Wait for a ticket and take its result: the count of blocks saved/loaded or
 * the operation's negative errno. timeout_ms < 0 waits forever. The ticket is
 * gone after a result. -ETIMEDOUT (the ticket stays), -ENOENT (no such ticket). */
int kvt_client_wait(struct kvt_client *c, uint64_t ticket, int timeout_ms);

/* Wait until layer `layer` of a LOAD is in engine memory (layers finish in
 * order), so computing that layer can start. Returns 0; the ticket stays for
 * kvt_client_wait. -ETIMEDOUT, -ENOENT. */
int kvt_client_wait_layer(struct kvt_client *c, uint64_t ticket, uint32_t layer,
			  int timeout_ms);

/* State of a ticket without waiting: returns 1 when done (*result set and the
 * ticket gone), 0 while in flight; *layers_done (may be NULL) counts the
 * layers in place. -ENOENT. */
int kvt_client_poll(struct kvt_client *c, uint64_t ticket, int *result, uint32_t *layers_done);

/* Pin / unpin / remove blocks. Return the count of keys acted on. */
int kvt_client_pin(struct kvt_client *c, const struct kvt_client_ns *ns,
		   const struct kvt_key *keys, uint32_t n);
int kvt_client_unpin(struct kvt_client *c, const struct kvt_client_ns *ns,
		     const struct kvt_key *keys, uint32_t n);
int kvt_client_remove(struct kvt_client *c, const struct kvt_client_ns *ns,
		      const struct kvt_key *keys, uint32_t n);

/* The daemon's counters as JSON text (see docs/metrics.md): *json is malloc'd, the
 * caller frees it. Needs no hello. With a token (kvt_client_opts.token or
 * $KVTIER_TOKEN), or after a hello, the reply adds that tenant's own figures
 * ("tenant"); a token no tenant has is refused (-EACCES). */
int kvt_client_stats(struct kvt_client *c, char **json);

/* Round trip of len (<= 4096) bytes, echoed back. Needs no hello. */
int kvt_client_ping(struct kvt_client *c, const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* KVTIER_CLIENT_H */
