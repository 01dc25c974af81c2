/* SPDX-License-Identifier: Apache-2.0 */
/* kvtierd's tenants as configured (see daemon_tenants.h). */
#include "app/daemon_tenants.h"

#include <errno.h>
#include <string.h>

#include "app/daemon_options.h"
#include "kvtier/store.h"

/* A tenant's name is written back as "[tenant NAME]": one line, no
 * brackets or quotes, no space at either end. */
static bool tenant_name_ok(const char *name)
{
	size_t len = strlen(name);

	return len && kvtd_one_line(name) && !strpbrk(name, "[]\"") && name[0] != ' ' &&
	       name[len - 1] != ' ';
}

static struct kvtd_tenant *tenant_find(struct kvtd_config *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->n_tenants; i++)
		if (!strcmp(cfg->tenants[i].name, name))
			return &cfg->tenants[i];
	return NULL;
}

struct kvtd_tenant *kvtd_tenant_named(struct kvtd_config *cfg, const char *name)
{
	struct kvtd_tenant *t = tenant_find(cfg, name);

	if (t)
		return t;
	/* the name is the default salt: it must fit whole, or two long names
	 * alike in their first bytes would share blocks */
	if (cfg->n_tenants >= KVTD_MAX_TENANTS || !tenant_name_ok(name) ||
	    !kvtd_fits(name, sizeof(t->salt)))
		return NULL;
	/* a slot the command line's tenants took back from the file's holds
	 * that tenant's settings still */
	t = &cfg->tenants[cfg->n_tenants++];
	memset(t, 0, sizeof(*t));
	kvtd_set_str(t->name, sizeof(t->name), name);
	kvtd_set_str(t->salt, sizeof(t->salt), name);
	return t;
}

bool kvtd_tenant_section(const char *section, char *name, size_t cap)
{
	const char *n = section + 7;

	if (strncmp(section, "tenant ", 7) && strncmp(section, "tenant:", 7))
		return false;
	while (*n == ' ' || *n == '"')
		n++;
	kvtd_set_str(name, cap, n);
	for (char *p = name + strlen(name); p > name && (p[-1] == '"' || p[-1] == ' ');)
		*--p = 0;
	return true;
}

/* A tenant without a token must be refused, not forgotten; one declared
 * twice would merge its keys into the first (a token silently replaced). */
int kvtd_tenants_declare(struct kvtd_config *cfg, const char *path, const char *text)
{
	for (const char *line = text; *line;) {
		const char *end = strchr(line, '\n'), *close;
		char section[128], name[64];

		if (!end)
			end = line + strlen(line);
		while (line < end && (*line == ' ' || *line == '\t'))
			line++;
		close = memchr(line, ']', (size_t)(end - line));
		if (*line == '[' && close && (size_t)(close - line - 1) < sizeof(section)) {
			memcpy(section, line + 1, (size_t)(close - line - 1));
			section[close - line - 1] = 0;
			if (kvtd_tenant_section(section, name, sizeof(name)) && tenant_find(cfg, name)) {
				fprintf(stderr, "kvtierd: %s: [%s]: tenant %s is declared twice\n",
					path, section, name);
				return -EINVAL;
			}
			if (kvtd_tenant_section(section, name, sizeof(name)) &&
			    !kvtd_tenant_named(cfg, name)) {
				fprintf(stderr, "kvtierd: %s: [%s]: at most %d tenants, names of 1 to "
					"32 bytes without brackets or quotes\n", path, section,
					KVTD_MAX_TENANTS);
				return -EINVAL;
			}
		}
		line = *end ? end + 1 : end;
	}
	return 0;
}

int kvtd_tenant_set(struct kvtd_config *cfg, const char *section, const char *key,
		    const char *v, bool *found)
{
	struct kvtd_tenant *t;
	char name[64];

	kvtd_tenant_section(section, name, sizeof(name));
	t = kvtd_tenant_named(cfg, name);
	*found = t != NULL;
	if (!t)
		return -EINVAL;
	if (!strcmp(key, "token")) {
		if (!kvtd_fits(v, sizeof(t->token)))
			return -EINVAL;
		kvtd_set_str(t->token, sizeof(t->token), v);
		t->has_token = true;
		return 0;
	}
	if (!strcmp(key, "salt")) {
		if (!kvtd_fits(v, sizeof(t->salt)) || !*v || !kvtd_one_line(v))
			return -EINVAL;
		kvtd_set_str(t->salt, sizeof(t->salt), v);
		return 0;
	}
	if (!strcmp(key, "models")) {
		if (!kvtd_fits(v, sizeof(t->models)) || !kvtd_one_line(v))
			return -EINVAL;
		kvtd_set_str(t->models, sizeof(t->models), v);
		return 0;
	}
	return -ENOENT;
}

static int add_cli(struct kvtd_config *cfg, const char *arg, bool *first)
{
	char buf[512], *token, *salt;
	struct kvtd_tenant *t;

	if (!kvtd_fits(arg, sizeof(buf)))
		return -EINVAL;
	kvtd_set_str(buf, sizeof(buf), arg);
	token = strchr(buf, ':');
	if (!token)
		return -EINVAL;
	*token++ = 0;
	salt = strchr(token, ':');
	if (salt)
		*salt++ = 0;
	if (*first) {
		cfg->n_tenants = 0; /* the command line's tenants replace the file's */
		*first = false;
	}
	if (tenant_find(cfg, buf))
		return -EEXIST;
	t = kvtd_tenant_named(cfg, buf);
	if (!t && cfg->n_tenants >= KVTD_MAX_TENANTS)
		return -ENOSPC;
	if (!t || !kvtd_fits(token, sizeof(t->token)) || !kvtd_one_line(token) ||
	    (salt && (!*salt || !kvtd_fits(salt, sizeof(t->salt)) || !kvtd_one_line(salt))))
		return -EINVAL;
	kvtd_set_str(t->token, sizeof(t->token), token);
	t->has_token = true;
	if (salt)
		kvtd_set_str(t->salt, sizeof(t->salt), salt);
	return 0;
}

int kvtd_tenant_add_cli(struct kvtd_config *cfg, const char *arg, bool *first)
{
	int err = add_cli(cfg, arg, first);

	if (err == -ENOSPC)
		fprintf(stderr, "kvtierd: --tenant %s: at most %d tenants\n", arg,
			KVTD_MAX_TENANTS);
	else if (err == -EEXIST)
		fprintf(stderr, "kvtierd: --tenant %s: that tenant is given twice\n", arg);
	else if (err)
		fprintf(stderr, "kvtierd: --tenant %s: expected NAME:TOKEN[:SALT] (a name "
			"of 1 to 32 bytes without brackets, quotes or control "
			"characters; a token of at most 256, a salt of 1 to %d, "
			"each on one line)\n", arg, KVT_SALT_MAX);
	return err ? -EINVAL : 0;
}

/* A token picks the tenant at HELLO: two tenants sharing one would make the
 * first of them unreachable (or either, by configuration order), and an
 * empty token beside others would let any client in as that tenant. */
int kvtd_tenants_check(const struct kvtd_config *cfg, bool printing)
{
	for (size_t i = 0; i < cfg->n_tenants; i++) {
		const struct kvtd_tenant *t = &cfg->tenants[i];

		if (!t->has_token && printing)
			continue;
		if (!t->has_token) {
			fprintf(stderr, "kvtierd: [tenant %s] has no token line: every tenant needs "
				"one (\"token =\" empty only for a lone tenant)\n", t->name);
			return -EINVAL;
		}
		if (!t->token[0] && cfg->n_tenants > 1) {
			fprintf(stderr, "kvtierd: tenant %s: an empty token is allowed only when it "
				"is the only tenant\n", t->name);
			return -EINVAL;
		}
		for (size_t j = 0; j < i; j++) {
			if (cfg->tenants[j].has_token && !strcmp(cfg->tenants[j].token, t->token)) {
				fprintf(stderr, "kvtierd: tenants %s and %s have the same token\n",
					cfg->tenants[j].name, t->name);
				return -EINVAL;
			}
		}
	}
	return 0;
}

void kvtd_tenants_print(const struct kvtd_config *cfg, FILE *f)
{
	for (size_t i = 0; i < cfg->n_tenants; i++) {
		const struct kvtd_tenant *t = &cfg->tenants[i];
		/* tokens are secrets: never printed */
		fprintf(f, "\n[tenant %s]\n%s\nsalt = %s\n", t->name,
			t->token[0] ? "; token = (set, not shown)" : "token =", t->salt);
		if (t->models[0])
			fprintf(f, "models = %s\n", t->models);
	}
}
