/* SPDX-License-Identifier: Apache-2.0 */
/* "reused": only blocks used at least twice go down to the tier.
 *
 * Used twice means used while cached, or stored again while a ghost list of
 * the blocks this rule turned away still remembers them (struct kvt_reuse):
 * a block refused on its way down comes back, is missed once, and is
 * admitted the next time. Most blocks a KV cache drops are used once (a
 * one-off prompt, the last partial block of a request), and those are the
 * writes this rule saves; the price is the first return of a block that
 * would have been read back from the tier. */
#include <errno.h>
#include <stdlib.h>

#include "store/admission.h"

static int reused_init(struct kvt_admission *a)
{
	struct kvt_reuse *u = malloc(sizeof(*u));
	int err;

	if (!u)
		return -ENOMEM;
	err = kvt_reuse_init(u);
	if (err) {
		free(u);
		return err;
	}
	a->state = u;
	return 0;
}

static void reused_fini(struct kvt_admission *a)
{
	if (a->state)
		kvt_reuse_fini(a->state);
	free(a->state);
	a->state = NULL;
}

static void reused_stored(struct kvt_admission *a, uint32_t i)
{
	kvt_reuse_stored(a->state, a, i);
}

static void reused_used(struct kvt_admission *a, uint32_t i)
{
	kvt_reuse_used(a->state, i);
}

static bool reused_admit(struct kvt_admission *a, uint32_t i)
{
	uint8_t *b = kvt_reuse_bits(a->state, i);

	if (!b || (*b & KVT_REUSED))
		return true; /* out of memory: admit, as with no rule */
	kvt_reuse_refuse(a->state, a, i);
	return false;
}

const struct kvt_admission_ops kvt_admission_reused_ops = {
	.name = "reused",
	.init = reused_init,
	.fini = reused_fini,
	.stored = reused_stored,
	.used = reused_used,
	.admit = reused_admit,
};
