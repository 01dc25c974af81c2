/* SPDX-License-Identifier: Apache-2.0 */
/* Recovery of the SSD tier: see ssd_recover.h. */
#include "tiers/ssd_recover.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/block_sum.h"

#define PAGE KVT_SSD_PAGE
#define SCAN_WINDOW (4u << 20)
/* Largest summary read: 88 bytes per record, a record at least two pages. */
#define SUM_MAX_BYTES (64u << 20)
/* Locations keep the header page in 24 bits (see ssd_internal.h). */
#define MAX_PAYLOAD_PAGES ((1u << 24) - 1)

void kvt_ssd_seg_name(uint64_t id, char *buf, size_t len)
{
	snprintf(buf, len, "seg-%016" PRIx64 ".kvt", id);
}

void kvt_ssd_sum_name(uint64_t id, char *buf, size_t len)
{
	snprintf(buf, len, "seg-%016" PRIx64 ".sum", id);
}

static uint64_t pages_of(uint64_t bytes)
{
	return (bytes + PAGE - 1) / PAGE;
}

/* ---- the directory listing ---------------------------------------------- */

enum name_kind { NAME_OTHER, NAME_SEG, NAME_SUM, NAME_TMP, NAME_BAD };

/* What a directory entry's name says it is; *id for seg-<id>.* names. */
static enum name_kind parse_name(const char *name, uint64_t *id)
{
	size_t len = strlen(name);
	const char *sfx = name + 4 + 16;

	if (strncmp(name, "seg-", 4))
		return NAME_OTHER;
	if (len < 4 + 16 + 4)
		return len > 4 && !strcmp(name + len - 4, ".kvt") ? NAME_BAD : NAME_OTHER;
	*id = 0;
	for (int i = 0; i < 16; i++) {
		char c = name[4 + i];
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (v < 0)
			return !strcmp(name + len - 4, ".kvt") ? NAME_BAD : NAME_OTHER;
		*id = *id << 4 | (uint64_t)v;
	}
	if (!strcmp(sfx, ".kvt"))
		return NAME_SEG;
	if (!strcmp(sfx, ".sum"))
		return NAME_SUM;
	if (!strcmp(sfx, ".kvt.tmp") || !strcmp(sfx, ".sum.tmp"))
		return NAME_TMP;
	return !strcmp(name + len - 4, ".kvt") ? NAME_BAD : NAME_OTHER;
}

static int add_file(struct kvt_ssd_recovery *r, size_t *cap, const char *name,
		    enum kvt_ssd_file_fate fate, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static int add_file(struct kvt_ssd_recovery *r, size_t *cap, const char *name,
		    enum kvt_ssd_file_fate fate, const char *fmt, ...)
{
	struct kvt_ssd_found_file *f;
	va_list ap;

	if (r->n_files == *cap) {
		size_t c = *cap ? 2 * *cap : 16;
		f = realloc(r->files, c * sizeof(*f));
		if (!f)
			return -ENOMEM;
		r->files = f;
		*cap = c;
	}
	f = &r->files[r->n_files++];
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->fate = fate;
	va_start(ap, fmt);
	vsnprintf(f->why, sizeof(f->why), fmt, ap);
	va_end(ap);
	return 0;
}

static const char *kind_of(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISLNK(m) ? "a symbolic link" :
	       S_ISSOCK(m) ? "a socket" : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "not a regular file";
}

/* A segment file found by its name, before its superblock is read. */
struct seg_file {
	uint64_t id;
	char name[NAME_MAX + 1];
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_seg_file(const void *a, const void *b)
{
	return cmp_u64(&((const struct seg_file *)a)->id, &((const struct seg_file *)b)->id);
}

/* ---- reading a segment's records ---------------------------------------- */

struct window {
	char *buf;           /* SCAN_WINDOW bytes, page aligned */
	uint32_t page, pages;
	char *big;           /* a record larger than the window */
};

/* Pointer to pages [page, page + n) of the file, through the window, or
 * NULL with *err set. */
static const char *win_get(int fd, uint32_t n_pages, struct window *w, uint32_t page,
			   uint32_t n, int *err)
{
	ssize_t r;

	if (page >= w->page && page + n <= w->page + w->pages)
		return w->buf + (size_t)(page - w->page) * PAGE;
	if (n <= SCAN_WINDOW / PAGE) {
		uint32_t want = SCAN_WINDOW / PAGE;

		if (want > n_pages - page)
			want = n_pages - page;
		r = pread(fd, w->buf, (size_t)want * PAGE, (off_t)page * PAGE);
		if (r < 0) {
			*err = -errno;
			return NULL;
		}
		w->page = page;
		w->pages = (uint32_t)((size_t)r / PAGE);
		if (n > w->pages) {
			*err = -EIO;
			return NULL;
		}
		return w->buf;
	}
	free(w->big);
	w->big = aligned_alloc(PAGE, (size_t)n * PAGE);
	if (!w->big) {
		*err = -ENOMEM;
		return NULL;
	}
	if (pread(fd, w->big, (size_t)n * PAGE, (off_t)page * PAGE) != (ssize_t)((size_t)n * PAGE)) {
		*err = -EIO;
		return NULL;
	}
	return w->big;
}

static int add_rec(struct kvt_ssd_found_seg *s, size_t *cap, const struct kvt_ssd_hdr *h,
		   uint32_t page)
{
	struct kvt_ssd_rec *r;

	if (s->n_recs == *cap) {
		size_t c = *cap ? 2 * *cap : 64;
		r = realloc(s->recs, c * sizeof(*r));
		if (!r)
			return -ENOMEM;
		s->recs = r;
		*cap = c;
	}
	r = &s->recs[s->n_recs++];
	*r = (struct kvt_ssd_rec){
		.ns_id = h->ns_id, .key = h->key, .parent = h->parent, .seq = h->seq,
		.raw_len = h->raw_len, .stored_len = h->stored_len, .sum = h->payload_sum,
		.page = page, .pages = (uint32_t)(1 + pages_of(h->stored_len)),
		.state = h->flags & KVT_SSD_F_TOMB ? KVT_SSD_REC_TOMB : KVT_SSD_REC_DEAD,
		.codec = h->codec, .hflags = (uint8_t)h->flags, .flags = KVT_SSD_REC_ONDISK };
	if (h->flags & KVT_SSD_F_TOMB)
		s->tombs++;
	if (page + r->pages > s->end)
		s->end = page + r->pages;
	return 0;
}

/* Scan the records of a segment: every page that starts a record whose
 * header and payload verify is one; anything else is stepped over a page at
 * a time, because with several writes in flight a torn record can sit before
 * acknowledged ones. A page with a header's magic that does not verify is a
 * damaged record. Returns 0 or -errno (the segment cannot be read). */
/* The last records scans saw, valid or damaged, in log order: only
 * damaged records among the last `inflight` can be writes a crash cut. */
struct tail {
	int32_t *seg;        /* per entry: the segment of a damaged record, or -1 */
	uint32_t size;
	uint64_t seen;
};

static void tail_add(struct tail *t, int32_t damaged_seg)
{
	t->seg[t->seen++ % t->size] = damaged_seg;
}

static int scan_segment(int fd, uint64_t salt, struct kvt_ssd_found_seg *s, int32_t seg,
			struct window *w, struct tail *tail)
{
	size_t cap = 0;
	int err = 0;

	w->pages = 0;
	s->end = 1;
	for (uint32_t p = 1; p < s->n_pages;) {
		const char *hp = win_get(fd, s->n_pages, w, p, 1, &err);
		const char *rec = NULL;
		struct kvt_ssd_hdr h;
		uint64_t pp;

		if (!hp)
			break;
		if (kvt_ssd_hdr_decode(hp, salt, &h)) {
			if (kvt_ssd_hdr_magic(hp)) {
				s->damaged++;
				tail_add(tail, seg);
			}
			p++;
			continue;
		}
		pp = pages_of(h.stored_len);
		if (p + 1 + pp <= s->n_pages && pp <= MAX_PAYLOAD_PAGES)
			rec = win_get(fd, s->n_pages, w, p, (uint32_t)(1 + pp), &err);
		if (!rec && err)
			break;
		if (!rec || kvt_block_sum(rec + PAGE, h.stored_len) != h.payload_sum) {
			s->damaged++;
			tail_add(tail, seg);
			p++;
			continue;
		}
		err = add_rec(s, &cap, &h, p);
		if (err)
			break;
		tail_add(tail, -1);
		p += (uint32_t)(1 + pp);
	}
	return err;
}

/* Read a segment's records from its summary, if the summary is whole and
 * agrees with the segment: same segment id, nonce and size, and the header
 * of its last record on disk is that record. Returns 0 (s filled), or
 * -EBADMSG with why set (scan instead), or -ENOMEM. */
static int read_summary(int dir_fd, int fd, uint64_t salt, struct kvt_ssd_found_seg *s,
			char *page_buf, char *why, size_t why_len)
{
	char name[64];
	struct kvt_ssd_sum_info info;
	struct kvt_ssd_sum_entry *e = NULL;
	struct kvt_ssd_hdr last;
	struct stat st;
	size_t n = 0, cap = 0;
	void *buf = NULL;
	int sfd, err = -EBADMSG;

	kvt_ssd_sum_name(s->id, name, sizeof(name));
	sfd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0 || fstat(sfd, &st) || !S_ISREG(st.st_mode) || st.st_size > SUM_MAX_BYTES) {
		snprintf(why, why_len, "cannot be read");
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		err = -ENOMEM;
		goto out;
	}
	if (pread(sfd, buf, (size_t)st.st_size, 0) != st.st_size) {
		snprintf(why, why_len, "short read");
		goto out;
	}
	err = kvt_ssd_sum_decode(buf, (size_t)st.st_size, salt, &info, &e, &n);
	if (err) {
		snprintf(why, why_len, err == -ENOMEM ? "out of memory" : "checksum or entries wrong");
		goto out;
	}
	err = -EBADMSG;
	if (info.seg_id != s->id || info.nonce != s->nonce || info.seg_pages != s->n_pages) {
		snprintf(why, why_len, "names another segment file");
		goto out;
	}
	if (n) {
		/* the log has the last word: its last record must be there */
		if (pread(fd, page_buf, PAGE, (off_t)e[n - 1].page * PAGE) != PAGE ||
		    kvt_ssd_hdr_decode(page_buf, salt, &last) || last.seq != e[n - 1].h.seq ||
		    last.ns_id != e[n - 1].h.ns_id || last.flags != e[n - 1].h.flags ||
		    memcmp(&last.key, &e[n - 1].h.key, sizeof(last.key)) ||
		    last.raw_len != e[n - 1].h.raw_len || last.stored_len != e[n - 1].h.stored_len ||
		    last.payload_sum != e[n - 1].h.payload_sum || last.codec != e[n - 1].h.codec) {
			snprintf(why, why_len, "its last record is not in the segment");
			goto out;
		}
	}
	s->end = 1;
	for (size_t i = 0; i < n; i++) {
		err = add_rec(s, &cap, &e[i].h, e[i].page);
		if (err)
			goto out;
	}
	s->end = info.covered;
	s->sealed = info.sealed;
	s->summary = true;
	s->open_summary = !info.sealed;
	err = 0;
out:
	if (err) {
		free(s->recs);
		s->recs = NULL;
		s->n_recs = 0;
		s->tombs = 0;
	}
	if (sfd >= 0)
		close(sfd);
	free(e);
	free(buf);
	return err;
}

/* ---- which records are live --------------------------------------------- */

static int cand_by_key_newest(const void *a, const void *b)
{
	const struct kvt_ssd_rec_info *x = &((const struct kvt_ssd_cand *)a)->info;
	const struct kvt_ssd_rec_info *y = &((const struct kvt_ssd_cand *)b)->info;
	int c;

	if (x->ns_id != y->ns_id)
		return x->ns_id < y->ns_id ? -1 : 1;
	c = memcmp(&x->key, &y->key, sizeof(x->key));
	if (c)
		return c;
	return x->seq > y->seq ? -1 : x->seq < y->seq;
}

static int cand_by_seq(const void *a, const void *b)
{
	uint64_t x = ((const struct kvt_ssd_cand *)a)->info.seq;
	uint64_t y = ((const struct kvt_ssd_cand *)b)->info.seq;

	return x < y ? -1 : x > y;
}

/* The newest entry of each key wins: a record is live, a tombstone leaves
 * the key absent; everything older is dead. */
static int resolve(struct kvt_ssd_recovery *r)
{
	size_t n = 0, keep = 0;

	for (size_t i = 0; i < r->n_segs; i++)
		n += r->segs[i].n_recs;
	if (!n)
		return 0;
	r->cands = malloc(n * sizeof(*r->cands));
	if (!r->cands)
		return -ENOMEM;
	for (size_t i = 0; i < r->n_segs; i++)
		for (size_t k = 0; k < r->segs[i].n_recs; k++) {
			const struct kvt_ssd_rec *x = &r->segs[i].recs[k];

			r->cands[r->n_cands++] = (struct kvt_ssd_cand){
				.info = { .ns_id = x->ns_id, .key = x->key, .parent = x->parent,
					  .has_parent = x->hflags & KVT_SSD_F_PARENT,
					  .codec = (enum kvt_codec_id)x->codec,
					  .raw_len = x->raw_len, .stored_len = x->stored_len,
					  .seq = x->seq },
				.seg = (uint32_t)i, .rec = k };
			if (x->seq >= r->next_seq)
				r->next_seq = x->seq + 1;
		}
	qsort(r->cands, r->n_cands, sizeof(*r->cands), cand_by_key_newest);
	for (size_t i = 0; i < r->n_cands;) {
		const struct kvt_ssd_cand *first = &r->cands[i];
		bool removed = r->segs[first->seg].recs[first->rec].state == KVT_SSD_REC_TOMB;
		size_t j = i + 1;

		for (; j < r->n_cands && r->cands[j].info.ns_id == first->info.ns_id &&
		       !memcmp(&r->cands[j].info.key, &first->info.key, KVT_KEY_BYTES); j++) {
			const struct kvt_ssd_cand *c = &r->cands[j];
			if (r->segs[c->seg].recs[c->rec].state == KVT_SSD_REC_TOMB)
				continue;
			if (removed)
				r->removed++;
			else
				r->superseded++;
		}
		if (!removed)
			r->cands[keep++] = *first;
		i = j;
	}
	r->n_cands = keep;
	qsort(r->cands, r->n_cands, sizeof(*r->cands), cand_by_seq);
	return 0;
}

/* ---- the job ------------------------------------------------------------ */

/* A segment file whose superblock was read. */
struct adopt {
	struct seg_file f;
	int fd;
	uint32_t n_pages;
	uint64_t file_bytes; /* when it differs from sb.seg_bytes, else 0 */
	struct kvt_ssd_sb sb;
};

/* The salt most segments carry; on a tie, the newest segment's. */
static uint64_t vote_salt(const struct adopt *a, size_t n)
{
	uint64_t best = 0;
	size_t best_votes = 0;

	for (size_t i = n; i-- > 0;) {
		size_t votes = 0;
		for (size_t k = 0; k < n; k++)
			votes += a[k].sb.salt == a[i].sb.salt;
		if (votes > best_votes) {
			best = a[i].sb.salt;
			best_votes = votes;
		}
	}
	return best;
}

/* List the directory: segment files (by name), summaries, and the fate of
 * every other file named like ours. */
static int list_dir(int dir_fd, struct kvt_ssd_recovery *r, size_t *files_cap,
		    struct seg_file **segs, size_t *n_segs, uint64_t **sums, size_t *n_sums)
{
	size_t cap_segs = 0, cap_sums = 0;
	struct dirent *e;
	DIR *d;
	int fd = openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int err = 0;

	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		err = -errno;
		close(fd);
		return err;
	}
	while (!err && (e = readdir(d))) {
		enum name_kind kind;
		struct stat st;
		uint64_t id = 0;

		kind = parse_name(e->d_name, &id);
		if (kind == NAME_OTHER)
			continue;
		if (fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW)) {
			if (errno == ENOENT)
				continue;
			err = add_file(r, files_cap, e->d_name, KVT_SSD_FILE_FOREIGN,
				       "cannot stat: %s", strerror(errno));
			continue;
		}
		if (kind == NAME_BAD) {
			err = add_file(r, files_cap, e->d_name, KVT_SSD_FILE_FOREIGN,
				       "not a segment name");
			continue;
		}
		if (!id || id > KVT_SSD_MAX_SEG_ID) {
			err = add_file(r, files_cap, e->d_name, KVT_SSD_FILE_FOREIGN,
				       "segment id out of range");
			continue;
		}
		if (id >= r->next_seg_id)
			r->next_seg_id = id + 1; /* never reuse a name seen here */
		if (!S_ISREG(st.st_mode)) {
			err = add_file(r, files_cap, e->d_name, KVT_SSD_FILE_FOREIGN, "%s",
				       kind_of(st.st_mode));
			continue;
		}
		if (kind == NAME_TMP) {
			err = add_file(r, files_cap, e->d_name, KVT_SSD_FILE_STALE,
				       "a segment or summary never finished");
		} else if (kind == NAME_SUM) {
			if (*n_sums == cap_sums) {
				uint64_t *v;
				cap_sums = cap_sums ? 2 * cap_sums : 64;
				v = realloc(*sums, cap_sums * sizeof(*v));
				if (!v) {
					err = -ENOMEM;
					break;
				}
				*sums = v;
			}
			(*sums)[(*n_sums)++] = id;
		} else {
			if (*n_segs == cap_segs) {
				struct seg_file *v;
				cap_segs = cap_segs ? 2 * cap_segs : 64;
				v = realloc(*segs, cap_segs * sizeof(*v));
				if (!v) {
					err = -ENOMEM;
					break;
				}
				*segs = v;
			}
			(*segs)[*n_segs].id = id;
			snprintf((*segs)[*n_segs].name, sizeof((*segs)[*n_segs].name), "%s", e->d_name);
			(*n_segs)++;
		}
	}
	closedir(d);
	if (*n_segs)
		qsort(*segs, *n_segs, sizeof(**segs), cmp_seg_file);
	if (*n_sums)
		qsort(*sums, *n_sums, sizeof(**sums), cmp_u64);
	return err;
}

int kvt_ssd_recover(int dir_fd, const uint64_t *meta_salt, uint32_t inflight,
		    struct kvt_ssd_recovery *r)
{
	struct seg_file *segs = NULL;
	struct adopt *ad = NULL;
	uint64_t *sums = NULL;
	size_t n_segs = 0, n_sums = 0, n_ad = 0, files_cap = 0;
	struct window w = { 0 };
	struct tail tail = { .size = inflight ? inflight : 1 };
	uint64_t damaged = 0;
	char *page_buf = NULL;
	int err;

	memset(r, 0, sizeof(*r));
	r->next_seq = 1;
	r->next_seg_id = 1;
	err = list_dir(dir_fd, r, &files_cap, &segs, &n_segs, &sums, &n_sums);
	if (err)
		goto out;
	err = -ENOMEM;
	page_buf = aligned_alloc(PAGE, PAGE);
	w.buf = aligned_alloc(PAGE, SCAN_WINDOW);
	ad = calloc(n_segs ? n_segs : 1, sizeof(*ad));
	tail.seg = calloc(tail.size, sizeof(*tail.seg));
	if (!page_buf || !w.buf || !ad || !tail.seg)
		goto out;

	/* superblocks: which files are format 2 segments, of which directory */
	for (size_t i = 0; i < n_segs; i++) {
		struct adopt *a = &ad[n_ad];
		struct stat st;
		int fd, rc;

		fd = openat(dir_fd, segs[i].name, O_RDWR | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0) {
			err = add_file(r, &files_cap, segs[i].name, KVT_SSD_FILE_QUARANTINE,
				       "cannot be opened: %s", strerror(errno));
			if (err)
				goto out;
			continue;
		}
		const char *why = NULL;
		if (fstat(fd, &st) || !S_ISREG(st.st_mode))
			why = "not a regular file";
		else if (st.st_size < 2 * PAGE)
			why = "too small to hold a record";
		else if (pread(fd, page_buf, PAGE, 0) != PAGE)
			why = "its superblock cannot be read";
		else if ((rc = kvt_ssd_sb_decode(page_buf, &a->sb)) == -ENOENT)
			why = "no format 2 superblock (format 1, or not a segment)";
		else if (rc)
			why = "damaged superblock";
		else if (a->sb.seg_id != segs[i].id)
			why = "its superblock names another segment";
		else if (a->sb.seg_bytes / PAGE > ((1u << 24) - 1))
			why = "its superblock's size is not a segment's";
		if (why) {
			close(fd);
			err = add_file(r, &files_cap, segs[i].name, KVT_SSD_FILE_QUARANTINE, "%s", why);
			if (err)
				goto out;
			continue;
		}
		a->f = segs[i];
		a->fd = fd;
		/* cut short or grown, a segment still holds the records that
		 * verify: it is read up to the smaller of the two sizes */
		a->n_pages = (uint32_t)(a->sb.seg_bytes / PAGE);
		if ((uint64_t)st.st_size != a->sb.seg_bytes) {
			a->file_bytes = (uint64_t)st.st_size;
			if ((uint64_t)st.st_size / PAGE < a->n_pages)
				a->n_pages = (uint32_t)(st.st_size / PAGE);
		}
		n_ad++;
	}

	/* the directory's salt: the meta file's, else what the segments say */
	if (meta_salt) {
		size_t agree = 0;

		for (size_t i = 0; i < n_ad; i++)
			agree += ad[i].sb.salt == *meta_salt;
		/* segments, none of them the meta file's: one or the other is
		 * another directory's, and which cannot be told here */
		if (n_ad && !agree) {
			err = -EBADMSG;
			goto out;
		}
		r->salt = *meta_salt;
		r->salt_from = KVT_SSD_SALT_META;
	} else if (n_ad) {
		r->salt = vote_salt(ad, n_ad);
		r->salt_from = KVT_SSD_SALT_SEGMENTS;
	} else {
		r->salt_from = KVT_SSD_SALT_NONE;
	}
	r->segs = calloc(n_ad ? n_ad : 1, sizeof(*r->segs));
	if (!r->segs)
		goto out;
	for (size_t i = 0; i < n_ad; i++) {
		struct kvt_ssd_found_seg *s = &r->segs[r->n_segs];
		char why[96];

		if (ad[i].sb.salt != r->salt) {
			close(ad[i].fd);
			err = add_file(r, &files_cap, ad[i].f.name, KVT_SSD_FILE_QUARANTINE,
				       "salt %016" PRIx64 " of another directory", ad[i].sb.salt);
			if (err)
				goto out;
			continue;
		}
		*s = (struct kvt_ssd_found_seg){ .id = ad[i].f.id, .fd = ad[i].fd,
						 .n_pages = ad[i].n_pages, .nonce = ad[i].sb.nonce,
						 .file_bytes = ad[i].file_bytes,
						 .seg_bytes = ad[i].sb.seg_bytes };
		ad[i].fd = -1;
		r->n_segs++;
		err = -EBADMSG;
		if (n_sums && bsearch(&s->id, sums, n_sums, sizeof(*sums), cmp_u64)) {
			err = read_summary(dir_fd, s->fd, r->salt, s, page_buf, why, sizeof(why));
			if (err == -ENOMEM)
				goto out;
			if (err) {
				r->summaries_rejected++;
				char name[64];
				kvt_ssd_sum_name(s->id, name, sizeof(name));
				err = add_file(r, &files_cap, name, KVT_SSD_FILE_STALE,
					       "summary %s", why);
				if (err)
					goto out;
				err = -EBADMSG;
			}
		}
		if (!err) {
			r->summaries++;
		} else {
			err = scan_segment(s->fd, r->salt, s, (int32_t)(r->n_segs - 1), &w, &tail);
			if (err == -ENOMEM)
				goto out;
			if (err) {
				/* unreadable from here on: keep what was read, take no more */
				s->damaged++;
				s->sealed = true;
			}
			r->scanned++;
		}
		/* a segment of the wrong size takes no more records */
		if (s->file_bytes)
			s->sealed = true;
	}
	/* a summary whose segment is not adopted describes nothing */
	for (size_t i = 0; i < n_sums; i++) {
		bool used = false;
		char name[64];

		for (size_t k = 0; k < r->n_segs && !used; k++)
			used = r->segs[k].id == sums[i];
		if (used)
			continue;
		kvt_ssd_sum_name(sums[i], name, sizeof(name));
		err = add_file(r, &files_cap, name, KVT_SSD_FILE_STALE, "summary of no segment here");
		if (err)
			goto out;
	}
	/* damaged records among the last writes of the log (those of the batch
	 * in flight when the process stopped) are writes a crash cut short;
	 * any other is corruption: every earlier write had completed */
	for (size_t i = 0; i < r->n_segs; i++) {
		damaged += r->segs[i].damaged;
		if (r->segs[i].end >= r->segs[i].n_pages)
			r->segs[i].sealed = true;
	}
	for (uint64_t k = 0; k < tail.size && k < tail.seen; k++)
		if (tail.seg[k] >= 0) {
			r->segs[tail.seg[k]].torn++;
			r->torn++;
		}
	r->corrupt = damaged - r->torn;
	err = resolve(r);
out:
	for (size_t i = 0; ad && i < n_ad; i++)
		if (ad[i].fd >= 0)
			close(ad[i].fd);
	if (err)
		kvt_ssd_recovery_fini(r);
	free(tail.seg);
	free(w.big);
	free(w.buf);
	free(page_buf);
	free(ad);
	free(sums);
	free(segs);
	return err;
}

void kvt_ssd_recovery_fini(struct kvt_ssd_recovery *r)
{
	for (size_t i = 0; i < r->n_segs; i++) {
		if (r->segs[i].fd >= 0)
			close(r->segs[i].fd);
		free(r->segs[i].recs);
	}
	free(r->segs);
	free(r->files);
	free(r->cands);
	memset(r, 0, sizeof(*r));
}
