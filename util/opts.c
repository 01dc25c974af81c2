/* SPDX-License-Identifier: Apache-2.0 */
/* Versioned option structs (see opts.h). Every such struct starts with its
 * size_t size field, which is what lets one helper serve them all. */
#include "util/opts.h"

#include <errno.h>
#include <string.h>

static size_t size_of(const void *opts)
{
	size_t size;

	memcpy(&size, opts, sizeof(size));
	return size;
}

static void set_size(void *opts, size_t size)
{
	memcpy(opts, &size, sizeof(size));
}

void kvt_opts_init(void *opts, size_t size, const void *def, size_t def_size)
{
	if (!opts || size < sizeof(size_t))
		return;
	memcpy(opts, def, size < def_size ? size : def_size);
	set_size(opts, size);
}

int kvt_opts_load(void *out, size_t out_size, const void *opts)
{
	size_t size;

	if (!opts)
		return -EINVAL;
	size = size_of(opts);
	if (size < sizeof(size_t) || size > out_size)
		return -EINVAL;
	memcpy(out, opts, size);
	set_size(out, out_size);
	return 0;
}

int kvt_opts_store(void *out, const void *full, size_t full_size)
{
	size_t size;

	if (!out)
		return -EINVAL;
	size = size_of(out);
	if (size < sizeof(size_t))
		return -EINVAL;
	if (size > full_size)
		size = full_size;
	memcpy(out, full, size);
	set_size(out, size);
	return 0;
}
