/* SPDX-License-Identifier: Apache-2.0 */
/* Copies that survive memory another process controls. Engine memory is the
 * engine's memfd mapped into the daemon; the engine can punch a hole in it
 * at any time (its seals forbid shrinking, not hole punching), and a hole in
 * huge-page memory with no free huge page left turns the daemon's next load
 * or store there into SIGBUS. Run such a copy under a guard: a SIGBUS on an
 * address inside the guarded range ends the copy early with -EFAULT, and the
 * daemon goes on. A SIGBUS anywhere else keeps its old meaning (the handler
 * there before, or the default: the process ends with the signal). */
#ifndef KVT_UTIL_FAULT_GUARD_H
#define KVT_UTIL_FAULT_GUARD_H

#include <stddef.h>

/* Run fn(arg) on this thread; a SIGBUS on an address in [lo, lo + len)
 * while it runs abandons it (fn must hold no lock nor allocation that a
 * jump out would leak: plain copies and sums over memory). Guards nest.
 * Returns 0, or -EFAULT when the guard fired. Where no handler could be
 * installed, fn runs unguarded. Async-signal-safe handler; SA_NODEFER, so
 * the jump out leaves SIGBUS unblocked without a signal-mask syscall. */
int kvt_fault_guard_run(const void *lo, size_t len, void (*fn)(void *arg), void *arg);

/* Install the SIGBUS handler now (the first kvt_fault_guard_run does it
 * once), or again after another one replaced it: the handler found is
 * kept, to run for a SIGBUS outside every guard. 0 or -errno. */
int kvt_fault_guard_install(void);

#endif /* KVT_UTIL_FAULT_GUARD_H */
