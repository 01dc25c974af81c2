/* SPDX-License-Identifier: Apache-2.0 */
/* Recovery of the SSD tier: a read-only job that runs once, at open. It
 * lists the data directory, reads each segment's superblock, adopts the
 * segments of the directory's salt, reads their records from a valid
 * summary or by scanning the segment, and resolves what is live (the newest
 * record of a key, unless a newer tombstone removed it). It changes nothing
 * on disk: it says what to do with every file it will not use (leave it,
 * move it aside, delete it), and the tier does it (ssd_open.c).
 *
 * Torn or corrupt records are never reported live: a record is valid only if
 * its salted header checksum and its payload checksum both hold. */
#ifndef KVT_TIERS_SSD_RECOVER_H
#define KVT_TIERS_SSD_RECOVER_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvtier/types.h"
#include "tiers/ssd.h"
#include "tiers/ssd_format.h"

enum kvt_ssd_rec_state {
	KVT_SSD_REC_PENDING = 0, /* being written */
	KVT_SSD_REC_LIVE = 1,
	KVT_SSD_REC_DEAD = 2,    /* freed, superseded, or its write failed */
	KVT_SSD_REC_TOMB = 3,    /* a tombstone on disk */
};

#define KVT_SSD_REC_ONDISK 1u /* written whole (or found valid): a summary lists it */

/* A record of a segment, as the tier keeps it: enough to read and verify its
 * payload without reading its header again, and to list it in a summary. */
struct kvt_ssd_rec {
	uint64_t ns_id;
	struct kvt_key key;
	struct kvt_key parent;
	uint64_t seq;
	uint64_t raw_len;
	uint64_t stored_len;
	uint64_t sum;      /* XXH3-64 of the stored payload, as in the header */
	uint32_t page;     /* of the header */
	uint32_t pages;    /* header included */
	uint32_t held;     /* kvt_ssd_hold count: the caller pins or reads it */
	uint8_t state;     /* enum kvt_ssd_rec_state */
	uint8_t codec;
	uint8_t hflags;    /* KVT_SSD_F_* of its header */
	uint8_t flags;     /* KVT_SSD_REC_ONDISK */
};

/* A segment recovery adopts. */
struct kvt_ssd_found_seg {
	uint64_t id;
	int fd;                  /* O_RDWR | O_DIRECT; the result's until taken (-1) */
	uint32_t n_pages;        /* read: the smaller of its size and its superblock's */
	uint64_t seg_bytes;      /* its superblock's size */
	uint64_t file_bytes;     /* its file's size when that differs, else 0 */
	uint32_t end;            /* the page after its last valid record */
	uint64_t nonce;          /* of its superblock */
	bool sealed;             /* takes no more records */
	bool summary;            /* its records came from its summary file */
	bool open_summary;       /* ... written when it was left open: delete it
	                          * before appending, it would no longer be whole */
	uint32_t damaged;        /* records that failed their checks */
	uint32_t torn;           /* of which writes a crash cut short */
	uint32_t tombs;          /* tombstones */
	struct kvt_ssd_rec *recs; /* by page; state DEAD or TOMB; the result's until taken */
	size_t n_recs;
};

/* What to do with a file recovery will not use. */
enum kvt_ssd_file_fate {
	KVT_SSD_FILE_FOREIGN,    /* not ours to touch: leave it, report it */
	KVT_SSD_FILE_QUARANTINE, /* ours or like ours, unreadable: move it aside */
	KVT_SSD_FILE_STALE,      /* our own half-made or orphaned file: delete it */
};

struct kvt_ssd_found_file {
	char name[NAME_MAX + 1];
	enum kvt_ssd_file_fate fate;
	char why[96];
};

/* A live record: the newest of its key, not removed. */
struct kvt_ssd_cand {
	struct kvt_ssd_rec_info info; /* loc is 0: the tier makes it */
	uint32_t seg;                 /* index into segs */
	size_t rec;                   /* index into segs[seg].recs */
};

enum kvt_ssd_salt_from {
	KVT_SSD_SALT_META,     /* the meta file had it */
	KVT_SSD_SALT_SEGMENTS, /* no meta file: the segments' superblocks gave it */
	KVT_SSD_SALT_NONE,     /* neither: a new directory (the caller draws one) */
};

struct kvt_ssd_recovery {
	uint64_t salt;
	enum kvt_ssd_salt_from salt_from;
	struct kvt_ssd_found_seg *segs; /* by id */
	size_t n_segs;
	struct kvt_ssd_found_file *files;
	size_t n_files;
	struct kvt_ssd_cand *cands;     /* by seq, oldest first */
	size_t n_cands;
	uint64_t next_seq;              /* above every sequence number found */
	uint64_t next_seg_id;           /* above every segment id seen */
	uint64_t torn;                  /* damaged records among the last `inflight` of the
	                                 * log (writes a crash cut short), skipped */
	uint64_t corrupt;               /* damaged records elsewhere, skipped */
	uint64_t superseded;            /* records hidden by a newer copy of their key */
	uint64_t removed;               /* records hidden by a newer tombstone */
	uint64_t scanned;               /* segments read whole */
	uint64_t summaries;             /* segments read from their summary */
	uint64_t summaries_rejected;    /* summaries that failed a check (then scanned) */
};

/* Run recovery over the directory open at dir_fd. meta_salt: the salt of the
 * directory's meta file, NULL when it has none. inflight: the most records
 * one batch writes (only those can be torn by a crash: earlier batches were
 * complete). Returns 0 and *out (free it with kvt_ssd_recovery_fini),
 * -ENOMEM, -EBADMSG (segments were found and none carries meta_salt: the
 * meta file or the segments are another directory's), or the -errno of
 * reading the directory. A segment that cannot be read is reported in
 * files, not an error. */
int kvt_ssd_recover(int dir_fd, const uint64_t *meta_salt, uint32_t inflight,
		    struct kvt_ssd_recovery *out);

/* Close the fds and free the records the caller did not take. */
void kvt_ssd_recovery_fini(struct kvt_ssd_recovery *r);

/* File names of segment id: "seg-<16 hex digits>.kvt" and its summary. */
void kvt_ssd_seg_name(uint64_t id, char *buf, size_t len);
void kvt_ssd_sum_name(uint64_t id, char *buf, size_t len);

#endif /* KVT_TIERS_SSD_RECOVER_H */
