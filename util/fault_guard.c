/* SPDX-License-Identifier: Apache-2.0 */
/* SIGBUS inside a guarded range becomes -EFAULT (util/fault_guard.h). */
#include "util/fault_guard.h"

#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

struct guard {
	sigjmp_buf env;
	uintptr_t lo;
	size_t len;
	struct guard *prev;
};

/* initial-exec: the handler reads it without the lazy allocation a dynamic
 * TLS model may do on a first access */
static __thread struct guard *cur __attribute__((tls_model("initial-exec")));
static struct sigaction old_bus;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int installed;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	struct guard *g = cur;

	if (g && si && (uintptr_t)si->si_addr - g->lo < g->len) {
		cur = g->prev;
		siglongjmp(g->env, 1);
	}
	if ((old_bus.sa_flags & SA_SIGINFO) && old_bus.sa_sigaction) {
		old_bus.sa_sigaction(sig, si, uc);
		return;
	}
	if (!(old_bus.sa_flags & SA_SIGINFO) && old_bus.sa_handler != SIG_DFL &&
	    old_bus.sa_handler != SIG_IGN) {
		old_bus.sa_handler(sig);
		return;
	}
	/* not ours: the old action, then the fault again (or the signal
	 * again, when it was sent, not taken) */
	sigaction(SIGBUS, &old_bus, NULL);
	if (!si || si->si_code <= 0)
		raise(sig);
}

static void install(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_sigbus;
	sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	installed = sigaction(SIGBUS, &sa, &old_bus) == 0;
}

int kvt_fault_guard_run(const void *lo, size_t len, void (*fn)(void *arg), void *arg)
{
	struct guard g;

	pthread_once(&once, install);
	if (!installed) {
		fn(arg);
		return 0;
	}
	g.lo = (uintptr_t)lo;
	g.len = len;
	g.prev = cur;
	if (sigsetjmp(g.env, 0))
		return -EFAULT; /* the handler put cur back */
	cur = &g;
	fn(arg);
	cur = g.prev;
	return 0;
}
