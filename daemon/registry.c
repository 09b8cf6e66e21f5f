/* registry.c: the daemon's loaded model instances, by name. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "registry.h"

/* Fill infos for every loaded instance. */
void
registry_infos(struct registry_infos *ri)
{
	memset(ri, 0, sizeof *ri);
}

/* Free what registry_infos() filled. */
void
registry_infos_free(struct registry_infos *ri)
{
	free(ri->ptrs);
	free(ri->infos);
	free(ri->group_ptrs);
	free(ri->groups);
	memset(ri, 0, sizeof *ri);
}

/* Unload everything (at shutdown). */
void
registry_shutdown(void)
{
}
