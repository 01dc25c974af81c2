/* SPDX-License-Identifier: Apache-2.0 */
/* The DRAM tier's region in a memfd that outlives the process: see
 * warm_region.h for its layout. */
#include "tiers/warm_region.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#define META_ALIGN (2ull << 20) /* slabs start huge-page aligned */
#define PAGE 4096ull
#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

struct kvt_warm_hdr {
	uint64_t magic;
	uint32_t version;
	uint32_t slot_hdr_bytes;
	uint64_t map_bytes;
	uint64_t slab_bytes;
	uint32_t n_slabs;
	uint32_t headroom;
	uint32_t slots_per_slab;
	uint32_t max_ns;
	uint32_t ns_entry_bytes;
	uint32_t desc_bytes;
	uint64_t slabs_off;
	uint64_t generation;
	uint64_t sum;           /* XXH3-64 of every field above */
	/* namespace table entries ever used (not covered by sum: it moves
	 * with every new namespace; read clamped to max_ns) */
	uint32_t ns_used;
};

static uint64_t round_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static uint64_t hdr_sum(const struct kvt_warm_hdr *h)
{
	return XXH3_64bits(h, offsetof(struct kvt_warm_hdr, sum));
}

/* Offsets of the tables and the first slab for geometry g. */
struct layout {
	uint64_t slab_table, ns_table, slots, slabs, map_bytes;
};

static struct layout layout_of(const struct kvt_warm_geom *g)
{
	struct layout l;

	l.slab_table = PAGE;
	l.ns_table = l.slab_table + round_up((uint64_t)g->n_slabs * sizeof(uint64_t), PAGE);
	l.slots = l.ns_table + round_up(KVT_WARM_MAX_NS * sizeof(struct kvt_warm_ns), PAGE);
	l.slabs = round_up(l.slots + (uint64_t)g->n_slabs * g->slots_per_slab *
					     sizeof(struct kvt_warm_slot), META_ALIGN);
	l.map_bytes = round_up(l.slabs + (uint64_t)g->n_slabs * g->slab_bytes, META_ALIGN);
	return l;
}

static void point(struct kvt_warm_region *r, const struct layout *l)
{
	r->hdr = (struct kvt_warm_hdr *)r->map;
	r->slab_table = (uint64_t *)(r->map + l->slab_table);
	r->ns_table = (struct kvt_warm_ns *)(r->map + l->ns_table);
	r->slots = (struct kvt_warm_slot *)(r->map + l->slots);
	r->slabs = r->map + l->slabs;
}

/* Whether fd's region matches g: the reason when it does not. */
static enum kvt_warm_refusal check(int fd, const struct kvt_warm_geom *g, const struct layout *l,
				   uint8_t **map_out)
{
	struct kvt_warm_hdr h;
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);
	uint8_t *map;

	*map_out = NULL;
	if (seals < 0 || (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW) ||
	    fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(h))
		return KVT_WARM_NOT_MEMFD;
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h)) {
		/* hugetlbfs takes no read(): look through a mapping */
		map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
		if (map == MAP_FAILED)
			return KVT_WARM_NOT_MEMFD;
		memcpy(&h, map, sizeof(h));
		munmap(map, (size_t)st.st_size);
	}
	if (h.magic != KVT_WARM_MAGIC)
		return KVT_WARM_BAD_MAGIC;
	if (h.version != KVT_WARM_VERSION)
		return KVT_WARM_BAD_VERSION;
	if (h.sum != hdr_sum(&h))
		return KVT_WARM_BAD_HEADER;
	if (h.slot_hdr_bytes != sizeof(struct kvt_warm_slot) || h.map_bytes != l->map_bytes ||
	    h.slab_bytes != g->slab_bytes || h.n_slabs != g->n_slabs ||
	    h.headroom != g->headroom || h.slots_per_slab != g->slots_per_slab ||
	    h.max_ns != KVT_WARM_MAX_NS || h.ns_entry_bytes != sizeof(struct kvt_warm_ns) ||
	    h.desc_bytes != sizeof(struct kvt_ns_desc) || h.slabs_off != l->slabs ||
	    (uint64_t)st.st_size != l->map_bytes)
		return KVT_WARM_BAD_GEOMETRY;
	map = mmap(NULL, l->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return KVT_WARM_NOT_MEMFD;
	*map_out = map;
	return KVT_WARM_ADOPTED;
}

/* A new sealed memfd of l->map_bytes, mapped. */
static int create(struct kvt_warm_region *r, const struct layout *l, bool try_huge)
{
	for (int huge = try_huge ? 1 : 0; huge >= 0; huge--) {
		unsigned flags = MFD_CLOEXEC | MFD_ALLOW_SEALING | (huge ? MFD_HUGETLB : 0);
		int fd = memfd_create("kvtier-dram", flags);
		void *map;

		if (fd < 0)
			continue;
		/* only the daemon's uid may open it (through /proc/PID/fd) */
		if (fchmod(fd, 0600) || ftruncate(fd, (off_t)l->map_bytes) ||
		    fcntl(fd, F_ADD_SEALS, SEALS)) {
			close(fd);
			continue;
		}
		/* with huge pages, the map fails here when too few are reserved
		 * (a shared mapping reserves them up front), not at first touch */
		map = mmap(NULL, l->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (map == MAP_FAILED) {
			close(fd);
			continue;
		}
		if (!huge)
			madvise(map, l->map_bytes, try_huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
		r->fd = fd;
		r->map = map;
		r->huge = huge;
		return 0;
	}
	return errno ? -errno : -ENOMEM;
}

int kvt_warm_open(struct kvt_warm_region *r, const struct kvt_warm_geom *g, int fd,
		  bool try_huge)
{
	struct layout l = layout_of(g);
	struct kvt_warm_hdr *h;
	uint8_t *map = NULL;
	int err;

	memset(r, 0, sizeof(*r));
	r->fd = -1;
	r->g = *g;
	r->map_bytes = l.map_bytes;
	if (fd >= 0) {
		r->refusal = check(fd, g, &l, &map);
		if (r->refusal == KVT_WARM_ADOPTED) {
			struct stat st;

			r->fd = fd;
			r->map = map;
			r->adopted = true;
			/* hugetlbfs reports huge blocks */
			r->huge = fstat(fd, &st) == 0 && st.st_blksize > (blksize_t)PAGE;
			point(r, &l);
			r->hdr->generation++;
			r->hdr->sum = hdr_sum(r->hdr);
			return 0;
		}
		close(fd);
	}
	err = create(r, &l, try_huge);
	if (err)
		return err;
	point(r, &l);
	h = r->hdr;
	*h = (struct kvt_warm_hdr){
		.magic = KVT_WARM_MAGIC, .version = KVT_WARM_VERSION,
		.slot_hdr_bytes = sizeof(struct kvt_warm_slot), .map_bytes = l.map_bytes,
		.slab_bytes = g->slab_bytes, .n_slabs = g->n_slabs, .headroom = g->headroom,
		.slots_per_slab = g->slots_per_slab, .max_ns = KVT_WARM_MAX_NS,
		.ns_entry_bytes = sizeof(struct kvt_warm_ns), .desc_bytes = sizeof(struct kvt_ns_desc),
		.slabs_off = l.slabs, .generation = 1,
	};
	h->sum = hdr_sum(h);
	return 0;
}

void kvt_warm_close(struct kvt_warm_region *r)
{
	if (r->map)
		munmap(r->map, r->map_bytes);
	if (r->fd >= 0)
		close(r->fd);
	r->map = NULL;
	r->fd = -1;
}

uint64_t kvt_warm_generation(const struct kvt_warm_region *r)
{
	return r->hdr->generation;
}

struct kvt_warm_slot *kvt_warm_slot_hdr(struct kvt_warm_region *r, uint32_t si, uint32_t idx)
{
	return &r->slots[(uint64_t)si * r->g.slots_per_slab + idx];
}

static uint64_t slot_sum(const struct kvt_warm_slot *h)
{
	/* the state word is not covered: it is what says the rest is whole */
	return XXH3_64bits(&h->len, offsetof(struct kvt_warm_slot, hdr_sum) -
					offsetof(struct kvt_warm_slot, len));
}

bool kvt_warm_slot_valid(const struct kvt_warm_slot *h)
{
	return __atomic_load_n(&h->state, __ATOMIC_ACQUIRE) == KVT_WARM_COMMITTED &&
	       h->hdr_sum == slot_sum(h);
}

void kvt_warm_slot_commit(struct kvt_warm_region *r, uint32_t si, uint32_t idx,
			  const struct kvt_warm_slot *h)
{
	struct kvt_warm_slot *d = kvt_warm_slot_hdr(r, si, idx);

	/* not committed while its fields change: a kill here leaves WRITING */
	__atomic_store_n(&d->state, KVT_WARM_WRITING, __ATOMIC_RELEASE);
	d->len = h->len;
	d->generation = r->hdr->generation;
	d->key = h->key;
	d->ns = h->ns;
	d->parent = h->parent;
	d->checksum = h->checksum;
	d->depth = h->depth;
	d->has_parent = h->has_parent;
	d->reuse_class = h->reuse_class;
	memset(d->pad, 0, sizeof(d->pad));
	memset(d->spare, 0, sizeof(d->spare));
	d->hdr_sum = slot_sum(d);
	__atomic_store_n(&d->state, KVT_WARM_COMMITTED, __ATOMIC_RELEASE);
}

void kvt_warm_slot_free(struct kvt_warm_region *r, uint32_t si, uint32_t idx)
{
	__atomic_store_n(&kvt_warm_slot_hdr(r, si, idx)->state, KVT_WARM_FREE, __ATOMIC_RELEASE);
}

void kvt_warm_slab_set(struct kvt_warm_region *r, uint32_t si, uint64_t slot_bytes)
{
	__atomic_store_n(&r->slab_table[si], slot_bytes, __ATOMIC_RELEASE);
}

uint32_t kvt_warm_ns_used(const struct kvt_warm_region *r)
{
	uint32_t n = __atomic_load_n(&r->hdr->ns_used, __ATOMIC_ACQUIRE);

	return n < KVT_WARM_MAX_NS ? n : KVT_WARM_MAX_NS;
}

int kvt_warm_ns_put(struct kvt_warm_region *r, const struct kvt_key *salt,
		    const struct kvt_ns_desc *desc)
{
	struct kvt_warm_ns *spare = NULL;
	uint32_t used = kvt_warm_ns_used(r);

	for (uint32_t i = 0; i < used; i++) {
		struct kvt_warm_ns *e = &r->ns_table[i];

		if (e->state == KVT_WARM_COMMITTED && !memcmp(&e->salt, salt, sizeof(*salt)))
			return 0;
		if (!spare && e->state != KVT_WARM_COMMITTED)
			spare = e;
	}
	if (!spare && used == KVT_WARM_MAX_NS)
		return -ENOSPC;
	if (!spare) {
		/* the mark first: an entry is read at a restart only below it */
		spare = &r->ns_table[used];
		__atomic_store_n(&r->hdr->ns_used, used + 1, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&spare->state, KVT_WARM_WRITING, __ATOMIC_RELEASE);
	spare->desc_bytes = sizeof(*desc);
	spare->salt = *salt;
	spare->desc = *desc;
	__atomic_store_n(&spare->state, KVT_WARM_COMMITTED, __ATOMIC_RELEASE);
	return 0;
}

void kvt_warm_ns_drop(struct kvt_warm_region *r, const struct kvt_key *salt)
{
	uint32_t used = kvt_warm_ns_used(r);

	for (uint32_t i = 0; i < used; i++) {
		struct kvt_warm_ns *e = &r->ns_table[i];

		if (e->state == KVT_WARM_COMMITTED && !memcmp(&e->salt, salt, sizeof(*salt)))
			__atomic_store_n(&e->state, KVT_WARM_FREE, __ATOMIC_RELEASE);
	}
}

const char *kvt_warm_refusal_name(enum kvt_warm_refusal why)
{
	switch (why) {
	case KVT_WARM_ADOPTED: return "adopted";
	case KVT_WARM_NOT_MEMFD: return "not a sealed memfd of the right size";
	case KVT_WARM_BAD_MAGIC: return "not a kvtier region";
	case KVT_WARM_BAD_VERSION: return "a region of another version";
	case KVT_WARM_BAD_GEOMETRY: return "a region of another geometry";
	case KVT_WARM_BAD_HEADER: return "a region header that fails its checksum";
	}
	return "unknown";
}
