/* SPDX-License-Identifier: Apache-2.0 */
/* Admission rules for demotion: which blocks leaving a tier are worth
 * writing into the one below (the SSD tier, where a write costs device
 * bandwidth and wear, and a block never read again is a write wasted).
 *
 * A rule sees what happens to records through the catalog (stored, used,
 * leaving the tier it admits into) and answers admit() when the demoter is
 * about to write a record into its tier; a record not admitted is dropped
 * instead. Like the policies, rules are const ops tables found by name, and
 * are not thread-safe: the caller's lock guards them.
 *
 * Built in, by name:
 *   "always" — every block (no rule; the default)
 *   "reused" — blocks used at least twice: used while cached, or stored
 *              again while a ghost list of the blocks it turned away still
 *              remembers them
 *   "useful" — blocks used twice, and blocks used once of a class (ends:
 *              no block stored under them; inner ones) whose sampled blocks
 *              (one in 16 by key hash, always admitted) are read back from
 *              the tier often enough: at least 1 in 10, and 0.7 times the
 *              fraction of the blocks that left the tier that come back
 *              soon (what room there is worth); never a block under one it
 *              refused. A tier too small for what comes back keeps its room
 *              for the likelier blocks, a large one takes them all. A block
 *              with a reuse class is judged within that class (ends and
 *              inner blocks of each); one without, as above */
#ifndef KVT_STORE_ADMISSION_H
#define KVT_STORE_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/ghost.h"
#include "store/index.h"

struct kvt_admission;

struct kvt_admission_ops {
	const char *name;
	/* allocate private state into a->state; 0 or -errno */
	int (*init)(struct kvt_admission *a);
	void (*fini)(struct kvt_admission *a);
	/* record i was stored (published, new) */
	void (*stored)(struct kvt_admission *a, uint32_t i);
	/* record i was used, in whatever tier */
	void (*used)(struct kvt_admission *a, uint32_t i);
	/* record i is about to be written into a->tier: true to write it */
	bool (*admit)(struct kvt_admission *a, uint32_t i);
	/* record i left a->tier (evicted, moved, dropped) */
	void (*left)(struct kvt_admission *a, uint32_t i);
};

struct kvt_admission {
	const struct kvt_admission_ops *ops;
	struct kvt_index *idx;
	uint8_t tier;           /* enum kvt_tier it admits into */
	uint64_t admitted, refused;
	void *state;
};

/* The ops table of a built-in rule by name, NULL if unknown. */
const struct kvt_admission_ops *kvt_admission_find(const char *name);

/* The i-th built-in rule, NULL past the last. */
const struct kvt_admission_ops *kvt_admission_at(size_t i);

/* Comma-separated names of the built-in rules, for --help texts. */
const char *kvt_admission_names(void);

/* Set up a with ops over idx, admitting into tier. Returns 0 or -ENOMEM. */
int kvt_admission_init(struct kvt_admission *a, const struct kvt_admission_ops *ops,
		       struct kvt_index *idx, uint8_t tier);
void kvt_admission_fini(struct kvt_admission *a);

/* What "reused" and "useful" both keep: one byte of state per record number
 * (zeroed as the array grows), of which bit KVT_REUSED says the block was
 * used twice: used while cached, or stored again while the ghost list of the
 * blocks the rule refused still remembered it. */
#define KVT_REUSED 1

struct kvt_reuse {
	uint8_t *bits;
	size_t n;
	struct kvt_ghost refused;
};

int kvt_reuse_init(struct kvt_reuse *u);
void kvt_reuse_fini(struct kvt_reuse *u);

/* The state byte of record i, NULL on -ENOMEM. */
uint8_t *kvt_reuse_bits(struct kvt_reuse *u, uint32_t i);

/* Record i was stored: its byte is reset, KVT_REUSED when the ghost list
 * remembers refusing it. */
void kvt_reuse_stored(struct kvt_reuse *u, const struct kvt_admission *a, uint32_t i);

/* Record i was used: KVT_REUSED. */
void kvt_reuse_used(struct kvt_reuse *u, uint32_t i);

/* Record i is refused: the ghost list remembers it (four times as many
 * blocks as the index holds). */
void kvt_reuse_refuse(struct kvt_reuse *u, const struct kvt_admission *a, uint32_t i);

#endif /* KVT_STORE_ADMISSION_H */
