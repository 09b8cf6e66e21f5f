/* req_model.c: load, unload and models requests. */
#include "config.h"

#include <stdlib.h>

#include "conn.h"
#include "instance.h"
#include "req.h"

/* Load a model in the background, streaming progress. */
static void
req_load(struct conn *c, Phased__Request *req)
{
	Phased__LoadRequest	*lr = req->load;
	struct stream		*s;
	char			*cause = NULL;
	int			 code;

	if ((s = stream_open(c, req->id, NULL, NULL)) == NULL)
		return;
	if (instance_load(lr->name, lr->path, lr->options, (int)lr->n_options,
	    s, &code, &cause) != 0) {
		conn_send_error(c, req->id, code, "%s", cause);
		free(cause);
		stream_free(s);
	}
}

/* Unload a model, cancelling its requests. */
static void
req_unload(struct conn *c, Phased__Request *req)
{
	char	*cause = NULL;

	if (instance_unload(req->unload->name, &cause) != 0) {
		conn_send_error(c, req->id, PHASED__ERROR_CODE__ERR_NOT_FOUND,
		    "%s", cause);
		free(cause);
		return;
	}
	conn_send_ok(c, req->id, "unloaded");
}

/* Describe every model. */
static void
req_models(struct conn *c, Phased__Request *req)
{
	Phased__Response	 r = PHASED__RESPONSE__INIT;
	Phased__ModelsReply	 mr = PHASED__MODELS_REPLY__INIT;
	struct inst_infos	 infos;

	instance_infos(&infos);
	mr.n_models = infos.n;
	mr.models = infos.ptrs;
	r.id = req->id;
	r.body_case = PHASED__RESPONSE__BODY_MODELS;
	r.models = &mr;
	conn_send(c, &r);
	instance_infos_free(&infos);
}

const struct req_entry req_load_entry = {
	.name = "load",
	.body = PHASED__REQUEST__BODY_LOAD,
	.admin = 1,
	.exec = req_load,
};
const struct req_entry req_unload_entry = {
	.name = "unload",
	.body = PHASED__REQUEST__BODY_UNLOAD,
	.admin = 1,
	.exec = req_unload,
};
const struct req_entry req_models_entry = {
	.name = "models",
	.body = PHASED__REQUEST__BODY_MODELS,
	.admin = 0,
	.exec = req_models,
};
