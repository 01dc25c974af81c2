/* SPDX-License-Identifier: Apache-2.0 */
/* The SSD tier's helper thread (tiers/ssd_helper.h). */
#include "tiers/ssd_helper.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

struct kvt_ssd_helper {
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cv;    /* a run posted, the helper's share done, stop */
	bool stop;
	bool busy;            /* a run is posted; its caller clears it */
	bool helper_done;     /* the helper took its last job of the run */
	size_t n, ran;
	size_t next;          /* the next job, taken atomically */
	kvt_ssd_helper_fn fn;
	void *arg;
};

/* Take jobs until none is left; how many this thread ran. */
static size_t take_jobs(struct kvt_ssd_helper *h, size_t n, kvt_ssd_helper_fn fn, void *arg,
			unsigned who)
{
	size_t k, ran = 0;

	while ((k = __atomic_fetch_add(&h->next, 1, __ATOMIC_RELAXED)) < n) {
		fn(arg, k, who);
		ran++;
	}
	return ran;
}

static void *helper_main(void *p)
{
	struct kvt_ssd_helper *h = p;

	pthread_mutex_lock(&h->lock);
	for (;;) {
		while (!h->stop && (!h->busy || h->helper_done))
			pthread_cond_wait(&h->cv, &h->lock);
		if (h->stop)
			break;
		pthread_mutex_unlock(&h->lock);
		size_t ran = take_jobs(h, h->n, h->fn, h->arg, 1);
		pthread_mutex_lock(&h->lock);
		h->ran = ran;
		h->helper_done = true;
		pthread_cond_broadcast(&h->cv);
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

int kvt_ssd_helper_start(struct kvt_ssd_helper **out)
{
	struct kvt_ssd_helper *h = calloc(1, sizeof(*h));
	int rc;

	if (!h)
		return -ENOMEM;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->cv, NULL);
	rc = pthread_create(&h->th, NULL, helper_main, h);
	if (rc) {
		pthread_cond_destroy(&h->cv);
		pthread_mutex_destroy(&h->lock);
		free(h);
		return -rc;
	}
	*out = h;
	return 0;
}

void kvt_ssd_helper_stop(struct kvt_ssd_helper *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->th, NULL);
	pthread_cond_destroy(&h->cv);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

size_t kvt_ssd_helper_run(struct kvt_ssd_helper *h, size_t n, kvt_ssd_helper_fn fn, void *arg)
{
	size_t ran;

	if (!h || n < 2) {
		for (size_t k = 0; k < n; k++)
			fn(arg, k, 0);
		return 0;
	}
	pthread_mutex_lock(&h->lock);
	if (h->busy) {
		pthread_mutex_unlock(&h->lock);
		for (size_t k = 0; k < n; k++)
			fn(arg, k, 0);
		return 0;
	}
	h->busy = true;
	h->helper_done = false;
	h->n = n, h->fn = fn, h->arg = arg, h->ran = 0;
	__atomic_store_n(&h->next, 0, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->lock);

	take_jobs(h, n, fn, arg, 0);

	pthread_mutex_lock(&h->lock);
	while (!h->helper_done)
		pthread_cond_wait(&h->cv, &h->lock);
	ran = h->ran;
	h->busy = false;
	pthread_mutex_unlock(&h->lock);
	return ran;
}
