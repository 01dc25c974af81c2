/* SPDX-License-Identifier: Apache-2.0 */
/* The DRAM tier: see dram.h for the region and the slab allocator. */
#include "tiers/dram.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/log.h"
#include "tiers/warm_region.h"
#include "util/opts.h"

#define MAX_CLASSES 64

struct slab {
	uint64_t slot_bytes; /* 0: the slab is in the free pool */
	uint32_t n_slots, n_used;
	uint32_t bump;       /* slots [bump, n_slots) were never handed out */
	uint32_t n_free;     /* entries on free_stack */
	uint32_t *free_stack;
	int cls;             /* size class, -1 when free */
	uint32_t next;       /* next slab: in the pool, or in its class's partial list */
	uint32_t prev;
	bool partial;        /* on its class's partial list */
};

struct size_class {
	uint64_t slot_bytes; /* 0: unused entry */
	uint32_t partial;    /* slabs of this class with a free slot */
	uint32_t slabs;      /* slabs serving this class */
};

struct dram {
	struct kvt_mem_tier base;
	uint8_t *region;
	uint64_t region_bytes, slab_bytes;
	struct slab *slabs;
	uint32_t n_slabs;
	uint32_t pool;       /* free slabs, linked through next */
	struct size_class classes[MAX_CLASSES];
	int n_classes;
	uint32_t slabs_in_use;
	uint64_t free_slot_bytes; /* free slots inside slabs in use */
	uint64_t reach;      /* atomic: the end of the highest slab ever taken */
	struct kvt_warm_region warm; /* when is_warm: the region and its headers */
	bool is_warm;
	uint64_t *found;     /* committed slots found in an adopted region */
	size_t n_found;
	uint64_t torn, bad_header;
};

#define NIL UINT32_MAX

static struct dram *to_dram(struct kvt_mem_tier *t)
{
	return (struct dram *)t;
}

static const struct dram *to_cdram(const struct kvt_mem_tier *t)
{
	return (const struct dram *)t;
}

static void partial_push(struct dram *d, struct slab *s, uint32_t si)
{
	struct size_class *c = &d->classes[s->cls];

	s->prev = NIL;
	s->next = c->partial;
	if (c->partial != NIL)
		d->slabs[c->partial].prev = si;
	c->partial = si;
	s->partial = true;
}

static void partial_remove(struct dram *d, struct slab *s, uint32_t si)
{
	struct size_class *c = &d->classes[s->cls];

	if (s->prev != NIL)
		d->slabs[s->prev].next = s->next;
	else
		c->partial = s->next;
	if (s->next != NIL)
		d->slabs[s->next].prev = s->prev;
	s->partial = false;
}

/* The class of slot_bytes, created on first use. A class left with no slab
 * is recycled; -ENOBUFS (not -ENOSPC: evicting would not help) when all
 * MAX_CLASSES sizes hold slabs. */
static int class_of(struct dram *d, uint64_t slot_bytes)
{
	int spare = -1;

	for (int i = 0; i < d->n_classes; i++) {
		if (d->classes[i].slot_bytes == slot_bytes)
			return i;
		if (spare < 0 && d->classes[i].slabs == 0)
			spare = i;
	}
	if (spare < 0 && d->n_classes == MAX_CLASSES)
		return -ENOBUFS;
	if (spare < 0)
		spare = d->n_classes++;
	d->classes[spare] = (struct size_class){ slot_bytes, NIL, 0 };
	return spare;
}

/* Slab si is in use: the region up to its end may be touched from now on. */
static void reach_to(struct dram *d, uint32_t si)
{
	uint64_t end = (uint64_t)(si + 1) * d->slab_bytes;

	if (end > d->reach)
		__atomic_store_n(&d->reach, end, __ATOMIC_RELEASE);
}

/* Give slab si to class cls. */
static int slab_take(struct dram *d, uint32_t si, int cls)
{
	struct slab *s = &d->slabs[si];
	uint64_t slot = d->classes[cls].slot_bytes;

	s->n_slots = (uint32_t)(d->slab_bytes / slot);
	s->free_stack = malloc(s->n_slots * sizeof(uint32_t));
	if (!s->free_stack)
		return -ENOMEM;
	d->pool = s->next;
	s->slot_bytes = slot;
	s->cls = cls;
	s->n_used = s->bump = s->n_free = 0;
	partial_push(d, s, si);
	d->classes[cls].slabs++;
	d->slabs_in_use++;
	d->free_slot_bytes += (uint64_t)s->n_slots * slot;
	reach_to(d, si);
	if (d->is_warm)
		kvt_warm_slab_set(&d->warm, si, slot);
	return 0;
}

/* Return an empty slab to the pool. */
static void slab_release(struct dram *d, struct slab *s, uint32_t si)
{
	if (s->partial)
		partial_remove(d, s, si);
	d->classes[s->cls].slabs--;
	d->slabs_in_use--;
	d->free_slot_bytes -= (uint64_t)s->n_slots * s->slot_bytes;
	free(s->free_stack);
	s->free_stack = NULL;
	s->slot_bytes = 0;
	if (d->is_warm)
		kvt_warm_slab_set(&d->warm, si, 0);
	s->cls = -1;
	s->next = d->pool;
	d->pool = si;
}

static int dram_alloc(struct kvt_mem_tier *t, uint64_t bytes, uint64_t *loc)
{
	struct dram *d = to_dram(t);
	uint64_t slot = d->base.headroom +
			((bytes + KVT_DRAM_SLOT_ALIGN - 1) & ~(uint64_t)(KVT_DRAM_SLOT_ALIGN - 1));
	uint32_t si, idx;
	struct slab *s;
	int cls, err;

	if (bytes == 0 || slot > d->slab_bytes)
		return -EINVAL;
	cls = class_of(d, slot);
	if (cls < 0)
		return cls;
	si = d->classes[cls].partial;
	if (si == NIL) {
		if (d->pool == NIL)
			return -ENOSPC;
		si = d->pool;
		err = slab_take(d, si, cls);
		if (err)
			return err;
	}
	s = &d->slabs[si];
	idx = s->n_free ? s->free_stack[--s->n_free] : s->bump++;
	if (++s->n_used == s->n_slots)
		partial_remove(d, s, si);
	d->free_slot_bytes -= slot;
	*loc = (uint64_t)si << 32 | idx;
	return 0;
}

static void dram_free(struct kvt_mem_tier *t, uint64_t loc)
{
	struct dram *d = to_dram(t);
	uint32_t si = (uint32_t)(loc >> 32), idx = (uint32_t)loc;
	struct slab *s = &d->slabs[si];

	if (d->is_warm)
		kvt_warm_slot_free(&d->warm, si, idx); /* first: never served again */
	d->free_slot_bytes += s->slot_bytes;
	if (s->n_used-- == s->n_slots)
		partial_push(d, s, si);
	if (s->n_used == 0) {
		slab_release(d, s, si);
		return;
	}
	s->free_stack[s->n_free++] = idx;
}

static void *dram_slot_ptr(struct kvt_mem_tier *t, uint64_t loc)
{
	struct dram *d = to_dram(t);
	uint32_t si = (uint32_t)(loc >> 32), idx = (uint32_t)loc;

	return d->region + (uint64_t)si * d->slab_bytes + (uint64_t)idx * d->slabs[si].slot_bytes +
	       d->base.headroom;
}

static void dram_stats(struct kvt_mem_tier *t, struct kvt_tier_stats *out)
{
	struct dram *d = to_dram(t);

	out->present = true;
	out->capacity_bytes = d->region_bytes;
}

/* The DRAM tier's named counters (tiers/tier.h): a new one is a row here. */
static size_t dram_counters(struct kvt_mem_tier *t, struct kvt_counter *out, size_t max)
{
	struct dram *d = to_dram(t);
	const struct kvt_counter c[] = {
		{ "slab_bytes", "Bytes of each DRAM slab (slots of one size class share a slab).",
		  "bytes", KVT_COUNTER_GAUGE, d->slab_bytes },
		{ "slabs", "Slabs of the DRAM region.", "slabs", KVT_COUNTER_GAUGE, d->n_slabs },
		{ "slabs_in_use", "DRAM slabs serving a size class (the others free for any).",
		  "slabs", KVT_COUNTER_GAUGE, d->slabs_in_use },
		{ "free_slot_bytes", "Bytes of free slots inside the DRAM slabs in use (room only "
		  "blocks of their size class can take).", "bytes", KVT_COUNTER_GAUGE,
		  d->free_slot_bytes },
	};

	return KVT_TIER_COUNTERS(out, max, c);
}

static void *dram_region(struct kvt_mem_tier *t, uint64_t *len)
{
	struct dram *d = to_dram(t);

	if (len)
		*len = d->region_bytes;
	return d->region;
}

static uint64_t dram_max_block(const struct kvt_mem_tier *t)
{
	return to_cdram(t)->slab_bytes - t->headroom;
}

static uint64_t dram_occupied(const struct kvt_mem_tier *t)
{
	const struct dram *d = to_cdram(t);

	return (uint64_t)d->slabs_in_use * d->slab_bytes - d->free_slot_bytes;
}

static void dram_close(struct kvt_mem_tier *t)
{
	struct dram *d = to_dram(t);

	if (!d)
		return;
	for (uint32_t i = 0; i < d->n_slabs; i++)
		free(d->slabs[i].free_stack);
	free(d->slabs);
	free(d->found);
	if (d->is_warm)
		kvt_warm_close(&d->warm); /* the memory lives on in the fds handed out */
	else if (d->region)
		munmap(d->region, d->region_bytes);
	free(d);
}

static const struct kvt_mem_tier_ops dram_ops = {
	.name = "dram",
	.alloc = dram_alloc,
	.free = dram_free,
	.slot_ptr = dram_slot_ptr,
	.region = dram_region,
	.max_block = dram_max_block,
	.occupied = dram_occupied,
	.stats = dram_stats,
	.counters = dram_counters,
	.close = dram_close,
};

static void *map_region(uint64_t bytes, bool try_huge)
{
	void *p = MAP_FAILED;

	if (try_huge) {
		/* no MAP_NORESERVE here: with it the map succeeds without reserved
		 * huge pages and the first touch dies of SIGBUS; without it the
		 * map fails up front and we fall back */
		p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
	}
	if (p == MAP_FAILED) {
		p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		/* no reserved huge pages: ask for transparent ones (fewer TLB misses
		 * on multi-MiB copies); harmless where THP is off. Without huge
		 * pages asked for, 4 KiB pages only, even where THP is on for
		 * everything: what a like-for-like comparison with fio's buffers
		 * needs */
		madvise(p, bytes, try_huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
	}
	return p;
}

static const struct kvt_dram_opts dram_defaults = {
	.size = sizeof(struct kvt_dram_opts),
	.huge_pages = true,
	.warm_fd = -1,
};

void kvt_dram_opts_init(struct kvt_dram_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &dram_defaults, sizeof(dram_defaults));
}

/* Put every slab that serves no slot in the pool, in order. */
static void pool_build(struct dram *d)
{
	d->pool = NIL;
	for (uint32_t i = d->n_slabs; i-- > 0;) {
		if (d->slabs[i].slot_bytes)
			continue;
		d->slabs[i].cls = -1;
		d->slabs[i].next = d->pool;
		d->pool = i;
	}
}

/* Whether the header of slot (si, idx) of slot_bytes is a committed block
 * that fits it; the slot is marked free otherwise, and counted. */
static bool slot_kept(struct dram *d, uint32_t si, uint32_t idx, uint64_t slot_bytes)
{
	struct kvt_warm_slot *h = kvt_warm_slot_hdr(&d->warm, si, idx);
	uint32_t state = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);

	if (state == KVT_WARM_FREE)
		return false;
	if (kvt_warm_slot_valid(h) && h->len && h->len <= slot_bytes - d->base.headroom)
		return true;
	if (state == KVT_WARM_WRITING)
		d->torn++;
	else
		d->bad_header++;
	kvt_warm_slot_free(&d->warm, si, idx);
	return false;
}

/* Rebuild the allocator from an adopted region: each slab the slab table
 * gives a slot size to is taken by that size's class, its committed slots
 * in use, the rest free; the locs of the committed ones are kept for the
 * store (kvt_dram_found). Returns 0 or -ENOMEM. */
static int adopt_slabs(struct dram *d)
{
	const uint64_t min_slot = d->base.headroom + KVT_DRAM_SLOT_ALIGN;
	size_t cap = 0;

	for (uint32_t si = 0; si < d->n_slabs; si++) {
		uint64_t slot = d->warm.slab_table[si];
		struct slab *s = &d->slabs[si];
		uint32_t n_slots;
		int cls;

		if (!slot)
			continue;
		if (slot < min_slot || slot > d->slab_bytes || slot % KVT_DRAM_SLOT_ALIGN ||
		    (cls = class_of(d, slot)) < 0) {
			d->bad_header++;
			kvt_warm_slab_set(&d->warm, si, 0);
			continue;
		}
		n_slots = (uint32_t)(d->slab_bytes / slot);
		s->free_stack = malloc(n_slots * sizeof(uint32_t));
		if (!s->free_stack)
			return -ENOMEM;
		s->n_slots = s->bump = n_slots;
		s->n_used = s->n_free = 0;
		for (uint32_t idx = n_slots; idx-- > 0;) {
			if (!slot_kept(d, si, idx, slot)) {
				s->free_stack[s->n_free++] = idx;
				continue;
			}
			if (d->n_found == cap) {
				uint64_t *v = realloc(d->found, (cap ? 2 * cap : 1024) * sizeof(*v));
				if (!v)
					return -ENOMEM;
				d->found = v;
				cap = cap ? 2 * cap : 1024;
			}
			d->found[d->n_found++] = (uint64_t)si << 32 | idx;
			s->n_used++;
		}
		if (!s->n_used) {
			free(s->free_stack);
			s->free_stack = NULL;
			kvt_warm_slab_set(&d->warm, si, 0);
			continue;
		}
		s->slot_bytes = slot;
		s->cls = cls;
		d->classes[cls].slabs++;
		d->slabs_in_use++;
		d->free_slot_bytes += (uint64_t)s->n_free * slot;
		reach_to(d, si);
		s->partial = false;
		if (s->n_used < s->n_slots)
			partial_push(d, s, si);
	}
	return 0;
}

/* Map the region of a warm tier: the one handed in when it fits, else a new
 * one (with what was refused logged). */
static int open_warm(struct dram *d, const struct kvt_dram_opts *o)
{
	struct kvt_warm_geom g = {
		.slab_bytes = d->slab_bytes, .n_slabs = d->n_slabs, .headroom = o->headroom,
		.slots_per_slab = (uint32_t)(d->slab_bytes / (o->headroom + KVT_DRAM_SLOT_ALIGN)),
	};
	int err = kvt_warm_open(&d->warm, &g, o->warm_fd, o->huge_pages);

	if (err)
		return err;
	d->is_warm = true;
	d->region = d->warm.slabs;
	if (o->warm_fd >= 0 && !d->warm.adopted)
		kvt_log(KVT_LOG_ERROR, "event=dram.warm.refused reason=\"%s\" action=\"the DRAM "
			"tier starts empty\"", kvt_warm_refusal_name(d->warm.refusal));
	return d->warm.adopted ? adopt_slabs(d) : 0;
}

int kvt_dram_open(const struct kvt_dram_opts *opts, struct kvt_mem_tier **out)
{
	struct kvt_dram_opts o = dram_defaults;
	struct dram *d;
	uint64_t slab;
	int err;

	if (!out || kvt_opts_load(&o, sizeof(o), opts))
		return -EINVAL;
	if (!o.warm)
		o.warm_fd = -1; /* read only with warm (zeroed opts say fd 0) */
	slab = o.slab_bytes ? o.slab_bytes : KVT_DRAM_DEFAULT_SLAB;
	if (slab % KVT_DRAM_SLOT_ALIGN || o.bytes < slab || o.bytes / slab >= NIL ||
	    o.headroom % KVT_DRAM_SLOT_ALIGN || o.headroom + KVT_DRAM_SLOT_ALIGN > slab) {
		if (o.warm_fd >= 0)
			close(o.warm_fd);
		return -EINVAL;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		if (o.warm_fd >= 0)
			close(o.warm_fd);
		return -ENOMEM;
	}
	d->base.ops = &dram_ops;
	d->base.kind = KVT_TIER_DRAM;
	d->base.headroom = o.headroom;
	d->slab_bytes = slab;
	d->n_slabs = (uint32_t)(o.bytes / slab);
	d->region_bytes = (uint64_t)d->n_slabs * slab;
	d->base.capacity = d->region_bytes;
	d->slabs = calloc(d->n_slabs, sizeof(*d->slabs));
	if (o.warm) {
		err = d->slabs ? open_warm(d, &o) : -ENOMEM;
		if (err && !d->slabs && o.warm_fd >= 0)
			close(o.warm_fd);
	} else {
		d->region = map_region(d->region_bytes, o.huge_pages);
		err = d->region ? 0 : -ENOMEM;
	}
	if (err || !d->slabs) {
		dram_close(&d->base);
		return err ? err : -ENOMEM;
	}
	pool_build(d);
	*out = &d->base;
	return 0;
}

struct kvt_warm_region *kvt_dram_warm(struct kvt_mem_tier *t)
{
	struct dram *d = to_dram(t);

	return t->ops == &dram_ops && d->is_warm ? &d->warm : NULL;
}

void kvt_dram_found(struct kvt_mem_tier *t, struct kvt_dram_found *out)
{
	struct dram *d = to_dram(t);

	*out = (struct kvt_dram_found){ .locs = d->found, .n = d->n_found, .torn = d->torn,
					.bad_header = d->bad_header };
}

void kvt_dram_found_done(struct kvt_mem_tier *t)
{
	struct dram *d = to_dram(t);

	free(d->found);
	d->found = NULL;
	d->n_found = 0;
}

const struct kvt_warm_slot *kvt_dram_slot_hdr(struct kvt_mem_tier *t, uint64_t loc)
{
	return kvt_warm_slot_hdr(&to_dram(t)->warm, (uint32_t)(loc >> 32), (uint32_t)loc);
}

void kvt_dram_slot_commit(struct kvt_mem_tier *t, uint64_t loc, const struct kvt_warm_slot *h)
{
	kvt_warm_slot_commit(&to_dram(t)->warm, (uint32_t)(loc >> 32), (uint32_t)loc, h);
}

uint64_t kvt_dram_reach(struct kvt_mem_tier *t)
{
	return t->ops == &dram_ops ? __atomic_load_n(&to_dram(t)->reach, __ATOMIC_ACQUIRE) : 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

int kvt_dram_prefault(void *base, uint64_t len, bool before_use, const int *stop,
		      uint64_t *done)
{
	const uint64_t chunk = 64ull << 20;
	uint8_t *p = base;
	uint64_t off;
	int err = 0;

	for (off = 0; off < len && !(stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE));
	     off += chunk) {
		uint64_t n = len - off < chunk ? len - off : chunk;

		if (madvise(p + off, n, MADV_POPULATE_WRITE) == 0)
			continue;
		if (errno != EINVAL || !before_use) {
			err = -errno;
			break;
		}
		for (uint64_t q = 0; q < n; q += 4096)
			((volatile uint8_t *)p)[off + q] = 0;
	}
	if (done)
		*done = off < len ? off : len;
	return err;
}
