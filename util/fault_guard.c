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
static pthread_mutex_t install_lock = PTHREAD_MUTEX_INITIALIZER;
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

int kvt_fault_guard_install(void)
{
	struct sigaction sa, now;
	int err = 0;

	pthread_mutex_lock(&install_lock);
	if (sigaction(SIGBUS, NULL, &now)) {
		err = -errno;
	} else if (!(now.sa_flags & SA_SIGINFO) || now.sa_sigaction != on_sigbus) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_sigbus;
		sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART;
		sigemptyset(&sa.sa_mask);
		old_bus = now;
		err = sigaction(SIGBUS, &sa, NULL) ? -errno : 0;
	}
	if (!err)
		__atomic_store_n(&installed, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&install_lock);
	return err;
}

static void install(void)
{
	(void)kvt_fault_guard_install();
}

int kvt_fault_guard_run(const void *lo, size_t len, void (*fn)(void *arg), void *arg)
{
	struct guard g;

	pthread_once(&once, install);
	if (!__atomic_load_n(&installed, __ATOMIC_ACQUIRE)) {
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
