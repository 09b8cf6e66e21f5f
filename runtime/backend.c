/* backend.c: the compute backends built into this program, by name. */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include "backend.h"
#ifdef HAVE_CUDA
#include "backend_cuda.h"
#endif

static const struct backend_ops *const backends[] = {
	&backend_cpu_ops,
#ifdef HAVE_CUDA
	&backend_cuda_ops,
#endif
};

/* The backend called name ("cpu", "cuda"), or NULL when not built. */
const struct backend_ops *
backend_find(const char *name)
{
	size_t	i;

	for (i = 0; i < sizeof backends / sizeof backends[0]; i++)
		if (strcmp(backends[i]->name, name) == 0)
			return (backends[i]);
	return (NULL);
}
