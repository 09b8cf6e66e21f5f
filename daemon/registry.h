/* registry.h: the daemon's loaded model instances, by name. */
#ifndef PHASED_REGISTRY_H
#define PHASED_REGISTRY_H

#include <stddef.h>

#include <phased/phased.pb-c.h>

/* ModelInfo messages describing every instance, for status and models. */
struct registry_infos {
	Phased__ModelInfo	**ptrs;
	Phased__ModelInfo	 *infos;
	Phased__DeviceGroup	**group_ptrs;
	Phased__DeviceGroup	 *groups;
	size_t			  n;
};

/* Fill infos for every loaded instance. */
void	registry_infos(struct registry_infos *);
/* Free what registry_infos() filled. */
void	registry_infos_free(struct registry_infos *);
/* Unload everything (at shutdown). */
void	registry_shutdown(void);

#endif
