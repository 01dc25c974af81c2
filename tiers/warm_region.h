/* SPDX-License-Identifier: Apache-2.0 */
/* The DRAM tier's region when it must outlive the process: a memfd that
 * systemd's fd store or a successor daemon keeps open across a restart,
 * laid out so the next process can rebuild its index from it alone.
 *
 *   [ region header, 4 KiB ][ slab table ][ namespace table ][ slot headers ]
 *   [ slabs ... ]
 *
 * The region header names the format (magic, version) and its geometry
 * (sizes of everything below); a region whose header differs from what the
 * opener asks for is refused whole. The slab table gives each slab's slot
 * size (0: free). The namespace table holds the descriptors of the
 * namespaces with blocks here, keyed by their fingerprint (the namespace's
 * salt, a digest of its descriptor), filled from its start: entries past
 * the high-water mark kept in the region header were never used. Every slot has a header, written when
 * its block is committed (key, namespace, parent, length, XXH3 of the
 * bytes, generation, and the header's own checksum), and marked free when
 * the slot is. The state word is written last on commit and first on free,
 * so a process killed at any instruction leaves a header that is either
 * whole and committed, or not committed.
 *
 * The memfd is mode 0600 and sealed against shrinking and growing (a
 * holder cannot pull pages out from under a mapping), and the seals are
 * sealed. Not thread-safe: the DRAM tier's caller (the store's lock) guards
 * every write. */
#ifndef KVT_TIERS_WARM_REGION_H
#define KVT_TIERS_WARM_REGION_H

#include <stdbool.h>
#include <stdint.h>

#include "kvtier/types.h"

#define KVT_WARM_MAGIC 0x316d726177747663ull /* "cvtwarm1" */
#define KVT_WARM_VERSION 2u
/* As many namespaces as a store has ids for (store_impl.h): every namespace
 * with blocks in DRAM finds room. The table's pages are allocated as its
 * entries are first used (about 180 bytes each), and only the entries
 * below the high-water mark are ever read. */
#define KVT_WARM_MAX_NS 65535u

enum kvt_warm_state {
	KVT_WARM_FREE = 0,
	KVT_WARM_WRITING = 0x57524954u,   /* a commit under way: never trusted */
	KVT_WARM_COMMITTED = 0x434f4d54u,
};

/* One slot's header: 128 bytes. */
struct kvt_warm_slot {
	uint32_t state;         /* enum kvt_warm_state, written last / first */
	uint32_t len;           /* bytes of the block */
	uint64_t generation;    /* the region's generation when committed */
	struct kvt_key key;
	struct kvt_key ns;      /* the namespace's fingerprint (its salt) */
	struct kvt_key parent;
	uint64_t checksum;      /* XXH3-64 of the block's bytes */
	uint32_t depth;         /* position in its prefix chain */
	uint8_t has_parent;
	uint8_t reuse_class;
	uint8_t pad[2];
	uint64_t hdr_sum;       /* XXH3-64 of the bytes from len to here */
	uint8_t spare[40];
};

_Static_assert(sizeof(struct kvt_warm_slot) == 128, "slot header is 128 bytes");

/* The geometry a region must have to be adopted. */
struct kvt_warm_geom {
	uint64_t slab_bytes;
	uint32_t n_slabs;
	uint32_t headroom;      /* bytes before each slot (tiers/tier.h) */
	uint32_t slots_per_slab; /* headers per slab: slab_bytes / smallest slot */
};

/* Why a region handed in was not adopted (the tier then starts empty). */
enum kvt_warm_refusal {
	KVT_WARM_ADOPTED = 0,
	KVT_WARM_NOT_MEMFD,     /* not a sealed memfd of ours (seals, size) */
	KVT_WARM_BAD_MAGIC,     /* not a region of this format at all */
	KVT_WARM_BAD_VERSION,   /* the format of another version */
	KVT_WARM_BAD_GEOMETRY,  /* another size, slab size, headroom or header size */
	KVT_WARM_BAD_HEADER,    /* the region header fails its checksum */
};

struct kvt_warm_hdr;
struct kvt_warm_ns;

struct kvt_warm_region {
	int fd;                 /* the memfd (owned) */
	uint8_t *map;           /* the whole of it */
	uint64_t map_bytes;
	struct kvt_warm_geom g;
	struct kvt_warm_hdr *hdr;
	uint64_t *slab_table;   /* n_slabs slot sizes */
	struct kvt_warm_ns *ns_table;
	struct kvt_warm_slot *slots; /* n_slabs * slots_per_slab */
	uint8_t *slabs;         /* the first slab */
	bool huge;              /* backed by reserved huge pages */
	bool adopted;           /* handed in, with its contents */
	enum kvt_warm_refusal refusal; /* of the fd handed in, when not adopted */
};

/* What the namespace table keeps of a namespace. */
struct kvt_warm_ns {
	uint32_t state;         /* KVT_WARM_COMMITTED or FREE */
	uint32_t desc_bytes;
	struct kvt_key salt;
	struct kvt_ns_desc desc;
};

/* Open a region of geometry g: adopt `fd` when it is >= 0 and holds a
 * region of exactly this geometry and version (the fd then belongs to the
 * region; its generation goes up by one), else create a new memfd
 * (MFD_HUGETLB first when try_huge, else normal pages) with an empty
 * region, keeping the reason fd was refused in r->refusal (fd is closed).
 * Returns 0, -ENOMEM, or the errno of memfd_create/ftruncate/mmap. */
int kvt_warm_open(struct kvt_warm_region *r, const struct kvt_warm_geom *g, int fd,
		  bool try_huge);

/* Unmap and close. The memory lives on while another fd (a dup handed to
 * a successor, systemd's copy) still refers to it. */
void kvt_warm_close(struct kvt_warm_region *r);

/* The header of slot idx of slab si. */
struct kvt_warm_slot *kvt_warm_slot_hdr(struct kvt_warm_region *r, uint32_t si, uint32_t idx);

/* Whether h is a whole, committed header (its own checksum verifies). */
bool kvt_warm_slot_valid(const struct kvt_warm_slot *h);

/* Write h (its fields but state, hdr_sum and generation, which this sets)
 * as the committed header of slot (si, idx). */
void kvt_warm_slot_commit(struct kvt_warm_region *r, uint32_t si, uint32_t idx,
			  const struct kvt_warm_slot *h);

/* Mark slot (si, idx) free. */
void kvt_warm_slot_free(struct kvt_warm_region *r, uint32_t si, uint32_t idx);

/* Record slab si's slot size (0: free). */
void kvt_warm_slab_set(struct kvt_warm_region *r, uint32_t si, uint64_t slot_bytes);

/* Keep namespace desc (fingerprint salt) in the table. Returns 0, or
 * -ENOSPC when the table is full (its blocks then do not survive). */
int kvt_warm_ns_put(struct kvt_warm_region *r, const struct kvt_key *salt,
		    const struct kvt_ns_desc *desc);

/* Forget namespace salt (detached: it holds nothing). */
void kvt_warm_ns_drop(struct kvt_warm_region *r, const struct kvt_key *salt);

/* Entries of the namespace table ever used: those to read at a restart. */
uint32_t kvt_warm_ns_used(const struct kvt_warm_region *r);

/* The region's generation (1 for a new region, +1 at each adoption). */
uint64_t kvt_warm_generation(const struct kvt_warm_region *r);

/* "another version", ... for logs. */
const char *kvt_warm_refusal_name(enum kvt_warm_refusal why);

#endif /* KVT_TIERS_WARM_REGION_H */
