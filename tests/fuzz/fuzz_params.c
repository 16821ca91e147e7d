/* libFuzzer target: request validation of /v1/completions and
 * /v1/chat/completions bodies (server/params.c). Any input must be accepted
 * or refused with a message naming the problem, never crash or leak. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/params.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int chat = 0; chat < 2; chat++) {
        struct gen_params p;
        json_t *root = NULL;
        const char *param = NULL;
        char msg[256];
        bool ok = weft_gen_params_parse((const char *)data, size, chat, &p, &root, &param, msg, sizeof msg);
        if (!ok && msg[0] == '\0') __builtin_trap();  /* every refusal says why */
        if (ok) {
            if (chat && (p.n_msgs == 0 || !p.msgs[0].content)) __builtin_trap();
            if (!chat && !p.prompt && !p.n_prompt_ids) __builtin_trap();
            if (p.n_stop > WEFT_MAX_STOP || p.top_logprobs > 20) __builtin_trap();
        }
        weft_gen_params_free(&p);
        json_decref(root);
    }
    return 0;
}
