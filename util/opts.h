/* SPDX-License-Identifier: Apache-2.0 */
/* Versioned option structs, the one convention of every struct in the API
 * (and inside it) that starts with `size_t size`:
 *
 *   - `size` is the sizeof the caller was built with. Fields are only ever
 *     appended, and an appended field must grow the struct (not sit in the
 *     old tail padding), so an older caller's struct is a prefix of today's.
 *   - `*_init(o, size)` writes the defaults of the fields that fit in `size`
 *     and nothing past it, then sets o->size = size.
 *   - `*_open` (and every call taking such a struct) accepts any size from
 *     sizeof(size_t) up to today's: fields past o->size take their defaults;
 *     a larger size names fields this library does not know: -EINVAL.
 *   - A struct the library fills (stats, info) gets the fields that fit in
 *     the caller's size, which the library sets to what it wrote.
 *
 * The helpers work on any such struct; the caller passes its own defaults.
 *
 * The option structs inside the tree that no program outside it is built
 * against (cluster/: directory, hint refresher, leases, peer client, peer
 * server, RDMA transport, peer tier; bench/trace/: reader, converter,
 * synthesiser, payload, replay, daemon replay) keep the `size` field and
 * their `_init`, and their calls take only size == sizeof: every caller is
 * compiled in the same build as the callee, so a caller with a shorter
 * struct cannot exist, and the size check's one job is to catch a struct
 * that skipped `_init`. One of them that moves to include/kvtier/ takes the
 * whole convention above (and util/api_layout.c's checks). */
#ifndef KVT_UTIL_OPTS_H
#define KVT_UTIL_OPTS_H

#include <stddef.h>

/* For x_init(o, size): copy the first `size` bytes of `def` (a whole struct
 * of def_size bytes holding the defaults) into `opts`, at most def_size, and
 * set its size field to `size`. Writes nothing when size cannot hold the size
 * field itself. */
void kvt_opts_init(void *opts, size_t size, const void *def, size_t def_size);

/* For a call taking opts: `out` is a whole struct of out_size bytes holding
 * the defaults; the fields the caller's `opts` has (its size field says how
 * many bytes) replace them, and out's size field becomes out_size. Returns
 * 0, or -EINVAL when opts is NULL, its size cannot hold the size field, or
 * it is larger than out_size. */
int kvt_opts_load(void *out, size_t out_size, const void *opts);

/* For a call filling a struct for the caller: copy the first `size` bytes of
 * `full` (full_size bytes) into `out`, where size is out's size field capped
 * at full_size, and set out's size field to it. Returns 0, or -EINVAL when
 * out is NULL or its size cannot hold the size field. */
int kvt_opts_store(void *out, const void *full, size_t full_size);

#endif /* KVT_UTIL_OPTS_H */
