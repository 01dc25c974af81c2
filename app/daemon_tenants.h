/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's tenants as configured: [tenant NAME] sections of the config
 * file and --tenant NAME:TOKEN[:SALT] on the command line. */
#ifndef KVT_APP_DAEMON_TENANTS_H
#define KVT_APP_DAEMON_TENANTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "app/daemon_config.h"

/* The tenant named name, created (its salt the name) when there is none
 * yet; NULL past KVTD_MAX_TENANTS or for a name that cannot be written back
 * as "[tenant NAME]". */
struct kvtd_tenant *kvtd_tenant_named(struct kvtd_config *cfg, const char *name);

/* Whether section is "tenant NAME" (or "tenant:NAME", NAME maybe quoted);
 * NAME goes to name. */
bool kvtd_tenant_section(const char *section, char *name, size_t cap);

/* Create the tenants of every [tenant NAME] header of the file's text, in
 * order (libinih reports keys only, so a section without any would vanish).
 * Returns 0, or -EINVAL with a message naming path. */
int kvtd_tenants_declare(struct kvtd_config *cfg, const char *path, const char *text);

/* Set key = v of the section's tenant. Returns 0, -ENOENT for an unknown
 * key, or -EINVAL (*found false when the tenant itself could not be made). */
int kvtd_tenant_set(struct kvtd_config *cfg, const char *section, const char *key,
		    const char *v, bool *found);

/* --tenant NAME:TOKEN[:SALT]: the first replaces the file's tenants (*first
 * is cleared). Returns 0 or -EINVAL, each with a message. */
int kvtd_tenant_add_cli(struct kvtd_config *cfg, const char *arg, bool *first);

/* Every tenant has a token, unique, empty only for a lone tenant; while
 * printing, a tenant read back without its (unprinted) token passes.
 * Returns 0 or -EINVAL with a message. */
int kvtd_tenants_check(const struct kvtd_config *cfg, bool printing);

/* The [tenant NAME] sections, tokens not shown. */
void kvtd_tenants_print(const struct kvtd_config *cfg, FILE *f);

#endif /* KVT_APP_DAEMON_TENANTS_H */
