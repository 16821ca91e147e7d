/* POST /v1/embeddings (server/api_embed.c). */
#ifndef WEFT_SERVER_API_EMBED_H
#define WEFT_SERVER_API_EMBED_H

#include "server/server.h"

/* Answer an embeddings request on c (loop thread): every input becomes one
 * engine embedding request (weft_request.embed), batched with the rest of
 * the engine's work; the answer goes out once all of them ended. tenant:
 * the caller's (NULL: anonymous). Counts in s->n_active until released, so
 * a drain waits for it. */
void weft_server_embeddings(struct weft_server *s, struct http_conn *c, const struct http_request *req,
                       struct tenant_cfg *tenant);

#endif
