/* SPDX-License-Identifier: Apache-2.0 */
/* KV layouts and the plan of a gather or scatter: which pieces go where, in
 * launches small enough to carry their arguments by value, on the path the
 * buffers allow (direct, staged, or the per-layer memcpy baseline). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/backend.h"
#include "util/opts.h"

static const struct kvt_dev_layout_desc layout_defaults = {
	.size = sizeof(struct kvt_dev_layout_desc),
	.pages_per_block = 1,
};

static const struct kvt_dev_xfer_opts xfer_defaults = {
	.size = sizeof(struct kvt_dev_xfer_opts),
	.path = KVT_DEV_PATH_AUTO,
};

void kvt_dev_layout_desc_init(struct kvt_dev_layout_desc *desc, size_t size_bytes)
{
	kvt_opts_init(desc, size_bytes, &layout_defaults, sizeof(layout_defaults));
}

void kvt_dev_xfer_opts_init(struct kvt_dev_xfer_opts *opts, size_t size_bytes)
{
	kvt_opts_init(opts, size_bytes, &xfer_defaults, sizeof(xfer_defaults));
}

/* Checks the caller's desc, loaded into *d (fields it lacks at their
 * defaults), and derives its sizes; 0 or -EINVAL with the reason kept. */
static int layout_derive(const struct kvt_dev_layout_desc *desc, struct kvt_dev_layout_desc *d,
			 uint32_t *n_kv, uint64_t *chunk, uint64_t *page_stride,
			 uint64_t *kv_stride, uint64_t *block_bytes)
{
	uint64_t c, ps, ks, b;

	*d = layout_defaults;
	if (kvt_opts_load(d, sizeof(*d), desc))
		return kvt_dev_fail(-EINVAL, "layout: descriptor size not set by _init");
	if (d->kind != KVT_LAYOUT_PAGED_KV && d->kind != KVT_LAYOUT_SPLIT_KV &&
	    d->kind != KVT_LAYOUT_MLA)
		return kvt_dev_fail(-EINVAL, "layout: unknown kind %d", (int)d->kind);
	if (!d->layers || !d->kv_heads || !d->head_dim || !d->page_tokens || !d->num_pages)
		return kvt_dev_fail(-EINVAL, "layout: a dimension is 0");
	if (d->elem_bytes != 1 && d->elem_bytes != 2 && d->elem_bytes != 4)
		return kvt_dev_fail(-EINVAL, "layout: elem_bytes %u not 1, 2 or 4", d->elem_bytes);
	if (d->kind == KVT_LAYOUT_MLA && d->kv_heads != 1)
		return kvt_dev_fail(-EINVAL, "layout: MLA has one latent head, not %u", d->kv_heads);
	if (!d->pages_per_block || d->pages_per_block > KVT_GS_MAX_PAGES)
		return kvt_dev_fail(-EINVAL, "layout: pages_per_block %u not in 1..%d",
				    d->pages_per_block, KVT_GS_MAX_PAGES);
	*n_kv = d->kind == KVT_LAYOUT_MLA ? 1 : 2;
	if (__builtin_mul_overflow((uint64_t)d->page_tokens * d->kv_heads,
				   (uint64_t)d->head_dim * d->elem_bytes, &c))
		return kvt_dev_fail(-EINVAL, "layout: page too large");
	ps = d->page_stride ? d->page_stride : c;
	if (ps < c)
		return kvt_dev_fail(-EINVAL, "layout: page_stride %llu < page bytes %llu",
				    (unsigned long long)ps, (unsigned long long)c);
	if (__builtin_mul_overflow(d->num_pages, ps, &ks))
		return kvt_dev_fail(-EINVAL, "layout: tensor too large");
	if (d->kind == KVT_LAYOUT_PAGED_KV && d->kv_stride) {
		if (d->kv_stride < c)
			return kvt_dev_fail(-EINVAL, "layout: kv_stride below page bytes");
		ks = d->kv_stride;
	}
	if (__builtin_mul_overflow(c, (uint64_t)*n_kv * d->pages_per_block, &b) ||
	    __builtin_mul_overflow(b, (uint64_t)d->layers, &b))
		return kvt_dev_fail(-EINVAL, "layout: block too large");
	*chunk = c;
	*page_stride = ps;
	*kv_stride = ks;
	*block_bytes = b;
	return 0;
}

uint64_t kvt_dev_layout_block_bytes(const struct kvt_dev_layout_desc *desc)
{
	uint64_t chunk = 0, ps = 0, ks = 0, bytes = 0;
	struct kvt_dev_layout_desc d;
	uint32_t n_kv;

	if (layout_derive(desc, &d, &n_kv, &chunk, &ps, &ks, &bytes))
		return 0;
	return bytes;
}

int kvt_dev_layout_create(struct kvt_dev *dev, const struct kvt_dev_layout_desc *desc,
			  struct kvt_dev_layout **out)
{
	struct kvt_dev_layout_desc whole;
	const struct kvt_dev_layout_desc *d = &whole;
	struct kvt_dev_layout *lay;
	uint64_t kv_stride = 0;
	int rc;

	if (!dev || !out)
		return kvt_dev_fail(-EINVAL, "kvt_dev_layout_create: bad arguments");
	*out = NULL;
	lay = calloc(1, sizeof(*lay));
	if (!lay)
		return -ENOMEM;
	rc = layout_derive(desc, &whole, &lay->n_kv, &lay->chunk_bytes, &lay->page_stride,
			   &kv_stride, &lay->block_bytes);
	if (rc)
		goto err_free;
	rc = kvt_dev_fail(-EINVAL, "layout: missing base pointers");
	if (!d->k_base || (d->kind == KVT_LAYOUT_SPLIT_KV && !d->v_base))
		goto err_free;
	lay->dev = dev;
	lay->kind = d->kind;
	lay->layers = d->layers;
	lay->ppb = d->pages_per_block;
	lay->num_pages = d->num_pages;
	lay->layer_bytes = lay->block_bytes / d->layers;
	rc = -ENOMEM;
	lay->bases = calloc((size_t)d->layers * lay->n_kv, sizeof(*lay->bases));
	if (!lay->bases)
		goto err_free;
	for (uint32_t l = 0; l < d->layers; l++) {
		uint64_t k = (uint64_t)(uintptr_t)d->k_base[l];

		rc = kvt_dev_fail(-EINVAL, "layout: base pointer of layer %u is NULL", l);
		if (!k || (d->kind == KVT_LAYOUT_SPLIT_KV && !d->v_base[l]))
			goto err_bases;
		lay->bases[l * lay->n_kv] = k;
		if (d->kind == KVT_LAYOUT_PAGED_KV)
			lay->bases[l * 2 + 1] = k + kv_stride;
		else if (d->kind == KVT_LAYOUT_SPLIT_KV)
			lay->bases[l * 2 + 1] = (uint64_t)(uintptr_t)d->v_base[l];
	}
	lay->base_align = 16;
	for (size_t i = 0; i < (size_t)d->layers * lay->n_kv; i++)
		while ((lay->bases[i] | lay->page_stride | lay->chunk_bytes) & (lay->base_align - 1))
			lay->base_align /= 2;
	rc = dev->ops->layout_upload(lay);
	if (rc)
		goto err_bases;
	*out = lay;
	return 0;

err_bases:
	free(lay->bases);
err_free:
	free(lay);
	return rc;
}

void kvt_dev_layout_destroy(struct kvt_dev_layout *lay)
{
	if (!lay)
		return;
	lay->dev->ops->layout_release(lay);
	free(lay->bases);
	free(lay);
}

uint64_t kvt_dev_layout_bytes(const struct kvt_dev_layout *lay)
{
	return lay ? lay->block_bytes : 0;
}

/* ---- the plan ---------------------------------------------------------- */

struct layer_note {
	kvt_dev_layer_cb cb;
	void *arg;
	uint32_t layer;
};

static void layer_note_run(void *arg, int status)
{
	struct layer_note *n = arg;

	if (!status) /* a layer the stream failed is not done */
		n->cb(n->arg, n->layer);
	free(n);
}

/* Blocks per launch: both caps of struct kvt_gs_args hold. */
static size_t launch_blocks(const struct kvt_dev_layout *lay)
{
	size_t by_pages = KVT_GS_MAX_PAGES / lay->ppb;

	return by_pages < KVT_GS_MAX_BLOCKS ? by_pages : KVT_GS_MAX_BLOCKS;
}

static int ensure_staging(struct kvt_dev_stream *s, size_t len)
{
	void *p;
	int rc;

	if (s->staging_len >= len)
		return 0;
	rc = s->dev->ops->stream_alloc(s, len, &p);
	if (rc)
		return rc;
	/* freed in stream order: earlier launches may still read the old one */
	if (s->staging)
		s->dev->ops->stream_free(s, s->staging);
	s->staging = p;
	s->staging_len = len;
	return 0;
}

/* Kernel launches of blocks [b0, b0 + nb), layers [lb, le). */
static int launch(struct kvt_dev_layout *lay, struct kvt_dev_stream *s, enum kvt_dev_dir dir,
		  const uint32_t *pages, size_t b0, size_t nb, void *const *targets,
		  uint64_t block_off, uint32_t lb, uint32_t le)
{
	struct kvt_gs_args a;

	memset(&a, 0, offsetof(struct kvt_gs_args, blocks));
	a.bases = lay->dev_bases;
	a.chunk_bytes = lay->chunk_bytes;
	a.page_stride = lay->page_stride;
	a.block_off = block_off;
	a.n_kv = lay->n_kv;
	a.ppb = lay->ppb;
	a.layer_begin = lb;
	a.layer_end = le;
	a.n_blocks = (uint32_t)nb;
	a.dir = dir;
	a.base_align = lay->base_align;
	for (size_t i = 0; i < nb; i++) {
		a.blocks[i] = (uint64_t)(uintptr_t)targets[i];
		memcpy(&a.pages[i * lay->ppb], &pages[(b0 + i) * lay->ppb],
		       lay->ppb * sizeof(uint32_t));
	}
	return lay->dev->ops->gs_launch(s, &a);
}

static int run_direct(struct kvt_dev_layout *lay, struct kvt_dev_stream *s,
		      enum kvt_dev_dir dir, const uint32_t *pages, size_t n,
		      void *const *kptr, uint32_t lb, uint32_t le)
{
	size_t step = launch_blocks(lay);
	int rc;

	for (size_t b0 = 0; b0 < n; b0 += step) {
		size_t nb = n - b0 < step ? n - b0 : step;

		rc = launch(lay, s, dir, pages, b0, nb, kptr + b0, lb * lay->layer_bytes, lb, le);
		if (rc)
			return rc;
	}
	return 0;
}

/* The copies between the staging buffer (slices of `range` bytes, in block
 * order) and the block buffers; block buffers that follow one another in
 * memory, as a run of DRAM slots often does, move in one large copy. */
static int staged_copies(struct kvt_dev_stream *s, enum kvt_dev_dir dir, void *const *blocks,
			 size_t nb, uint64_t off, uint64_t range)
{
	size_t i = 0, j;
	int rc;

	while (i < nb) {
		char *host = (char *)blocks[i] + off, *stage = (char *)s->staging + i * range;

		for (j = i + 1; j < nb && off == 0 && (char *)blocks[j] == host + (j - i) * range; j++)
			;
		rc = dir == KVT_DEV_GATHER ? s->dev->ops->copy_async(s, host, stage, (j - i) * range) :
					     s->dev->ops->copy_async(s, stage, host, (j - i) * range);
		if (rc)
			return rc;
		i = j;
	}
	return 0;
}

static int run_staged(struct kvt_dev_layout *lay, struct kvt_dev_stream *s,
		      enum kvt_dev_dir dir, const uint32_t *pages, size_t n,
		      void *const *blocks, uint32_t lb, uint32_t le)
{
	size_t step = launch_blocks(lay);
	uint64_t range = (uint64_t)(le - lb) * lay->layer_bytes;
	uint64_t off = lb * lay->layer_bytes;
	void *slices[KVT_GS_MAX_BLOCKS];
	int rc;

	rc = ensure_staging(s, (n < step ? n : step) * range);
	if (rc)
		return rc;
	for (size_t i = 0; i < step; i++)
		slices[i] = (char *)s->staging + i * range;
	for (size_t b0 = 0; b0 < n; b0 += step) {
		size_t nb = n - b0 < step ? n - b0 : step;

		if (dir == KVT_DEV_SCATTER) {
			rc = staged_copies(s, dir, blocks + b0, nb, off, range);
			if (rc)
				return rc;
		}
		rc = launch(lay, s, dir, pages, b0, nb, slices, 0, lb, le);
		if (rc)
			return rc;
		if (dir == KVT_DEV_GATHER) {
			rc = staged_copies(s, dir, blocks + b0, nb, off, range);
			if (rc)
				return rc;
		}
	}
	return 0;
}

/* The baseline engines start from: one copy per contiguous piece. */
static int run_per_layer(struct kvt_dev_layout *lay, struct kvt_dev_stream *s,
			 enum kvt_dev_dir dir, const uint32_t *pages, size_t n,
			 void *const *blocks, uint32_t lb, uint32_t le)
{
	uint64_t c = lay->chunk_bytes;
	int rc;

	for (size_t b = 0; b < n; b++) {
		for (uint32_t l = lb; l < le; l++) {
			for (uint32_t k = 0; k < lay->n_kv; k++) {
				for (uint32_t p = 0; p < lay->ppb; p++) {
					char *eng = (char *)(uintptr_t)lay->bases[l * lay->n_kv + k] +
						    pages[b * lay->ppb + p] * lay->page_stride;
					char *blk = (char *)blocks[b] +
						    ((l * lay->n_kv + k) * (uint64_t)lay->ppb + p) * c;

					rc = dir == KVT_DEV_GATHER ?
						     s->dev->ops->copy_async(s, blk, eng, c) :
						     s->dev->ops->copy_async(s, eng, blk, c);
					if (rc)
						return rc;
				}
			}
		}
	}
	return 0;
}

static int xfer(struct kvt_dev_layout *lay, struct kvt_dev_stream *s, enum kvt_dev_dir dir,
		const uint32_t *pages, size_t n, void *const *blocks,
		const struct kvt_dev_xfer_opts *opts)
{
	struct kvt_dev_xfer_opts o = xfer_defaults;
	enum kvt_dev_path path;
	void **kptr = NULL;
	bool per_layer_done;
	const char *what = dir == KVT_DEV_GATHER ? "gather" : "scatter";
	int rc = 0;

	if (!lay || !s || lay->dev != s->dev || (n && (!pages || !blocks)))
		return kvt_dev_fail(-EINVAL, "%s: bad arguments", what);
	if (opts && kvt_opts_load(&o, sizeof(o), opts))
		return kvt_dev_fail(-EINVAL, "%s: bad opts size", what);
	if (o.path < KVT_DEV_PATH_AUTO || o.path > KVT_DEV_PATH_PER_LAYER)
		return kvt_dev_fail(-EINVAL, "%s: unknown path %d", what, (int)o.path);
	if (o.layer_events)
		for (uint32_t l = 0; l < lay->layers; l++)
			if (!o.layer_events[l] || o.layer_events[l]->dev != lay->dev)
				return kvt_dev_fail(-EINVAL, "%s: layer event %u missing", what, l);
	for (size_t i = 0; i < n * lay->ppb; i++)
		if (pages[i] >= lay->num_pages)
			return kvt_dev_fail(-ERANGE, "%s: page id %u >= %llu pages", what, pages[i],
					    (unsigned long long)lay->num_pages);
	for (size_t i = 0; i < n; i++)
		if (!blocks[i])
			return kvt_dev_fail(-EINVAL, "%s: block buffer %zu is NULL", what, i);

	path = o.path;
	if (n && (path == KVT_DEV_PATH_AUTO || path == KVT_DEV_PATH_DIRECT)) {
		kptr = malloc(n * sizeof(*kptr));
		if (!kptr)
			return -ENOMEM;
		for (size_t i = 0; i < n; i++) {
			kptr[i] = lay->dev->ops->kernel_ptr(lay->dev, blocks[i], lay->block_bytes);
			if (kptr[i])
				continue;
			if (path == KVT_DEV_PATH_DIRECT) {
				rc = kvt_dev_fail(-EFAULT, "%s: block buffer %zu is neither device "
							   "memory nor mapped pinned host memory",
						  what, i);
				goto out;
			}
			path = KVT_DEV_PATH_STAGED;
			break;
		}
		if (path == KVT_DEV_PATH_AUTO)
			path = KVT_DEV_PATH_DIRECT;
	}

	/* Per-layer completion splits the work by layer, so that layer l is
	 * signalled before layer l + 1 is even started. */
	per_layer_done = o.layer_events || o.layer_cb;
	for (uint32_t lb = 0; lb < lay->layers; lb = per_layer_done ? lb + 1 : lay->layers) {
		uint32_t le = per_layer_done ? lb + 1 : lay->layers;

		if (n == 0)
			rc = 0;
		else if (path == KVT_DEV_PATH_DIRECT)
			rc = run_direct(lay, s, dir, pages, n, kptr, lb, le);
		else if (path == KVT_DEV_PATH_STAGED)
			rc = run_staged(lay, s, dir, pages, n, blocks, lb, le);
		else
			rc = run_per_layer(lay, s, dir, pages, n, blocks, lb, le);
		if (rc)
			goto out;
		if (o.layer_events) {
			rc = lay->dev->ops->event_record(o.layer_events[lb], s);
			if (rc)
				goto out;
		}
		if (o.layer_cb) {
			struct layer_note *note = malloc(sizeof(*note));

			rc = -ENOMEM;
			if (!note)
				goto out;
			note->cb = o.layer_cb;
			note->arg = o.layer_cb_arg;
			note->layer = lb;
			rc = lay->dev->ops->stream_callback(s, layer_note_run, note);
			if (rc) {
				free(note);
				goto out;
			}
		}
	}
out:
	free(kptr);
	return rc;
}

int kvt_dev_gather(struct kvt_dev_layout *layout, struct kvt_dev_stream *stream,
		   const uint32_t *pages, size_t n_blocks, void *const *blocks,
		   const struct kvt_dev_xfer_opts *opts)
{
	return xfer(layout, stream, KVT_DEV_GATHER, pages, n_blocks, blocks, opts);
}

int kvt_dev_scatter(struct kvt_dev_layout *layout, struct kvt_dev_stream *stream,
		    const uint32_t *pages, size_t n_blocks, const void *const *blocks,
		    const struct kvt_dev_xfer_opts *opts)
{
	/* the blocks are only read; one plan serves both directions */
	return xfer(layout, stream, KVT_DEV_SCATTER, pages, n_blocks, (void *const *)blocks, opts);
}

void kvt_gs_run_cpu(const struct kvt_gs_args *a)
{
	uint64_t n = kvt_gs_chunks(a);
	const char *src;
	char *dst;

	for (uint64_t c = 0; c < n; c++) {
		kvt_gs_chunk(a, c, &src, &dst);
		memcpy(dst, src, a->chunk_bytes);
	}
}
