/* Expected strings were produced by rendering the real Jinja templates
 * (SmolLM2-Instruct, Meta-Llama-3-8B-Instruct, Llama-2-7b-chat-hf) with
 * jinja2 as transformers does (trim_blocks, lstrip_blocks), leading BOS
 * removed since weft's tokenizer adds it. */
#include <stdlib.h>
#include <string.h>

#include "core/chat.h"
#include "tests/check.h"

#define N_(a) (sizeof(a) / sizeof((a)[0]))

static const struct weft_chat_msg conv_sys_multi[] = {
    { .role = "system", .content = "You are terse." }, { .role = "user", .content = "Hi" },
    { .role = "assistant", .content = "Hello!" }, { .role = "user", .content = "Bye" },
};
static const struct weft_chat_msg conv_multi[] = {
    { .role = "user", .content = "Hi" }, { .role = "assistant", .content = "Hello!" },
    { .role = "user", .content = "Bye" },
};
static const struct weft_chat_msg conv_spaces[] = {
    { .role = "system", .content = "  Be brief. " }, { .role = "user", .content = "  Hi there \n" },
    { .role = "assistant", .content = " Sure. \n\n" }, { .role = "user", .content = "\tok " },
};
static const struct weft_chat_msg conv_single[] = {
    { .role = "user", .content = "What is 2+2?" },
};

static void check_render(enum weft_chat_style style, const struct weft_chat_msg *m, size_t n, bool add,
                         const char *want, int line)
{
    char *got = NULL;
    weft_status st = weft_chat_render(style, m, n, add, &got);
    CHECK_MSG(st == WEFT_OK, "line %d: status %d (%s)", line, (int)st, weft_last_error());
    CHECK_MSG(got && strcmp(got, want) == 0, "line %d (%s, add=%d):\n  got  [%s]\n  want [%s]", line,
              weft_chat_style_name(style), (int)add, got ? got : "(null)", want);
    free(got);
}
#define RENDER_IS(style, conv, add, want) check_render(style, conv, N_(conv), add, want, __LINE__)

static void chatml_renders_multi_turn_with_system(void)
{
    RENDER_IS(WEFT_CHAT_CHATML, conv_sys_multi, false,
              "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n");
    RENDER_IS(WEFT_CHAT_CHATML, conv_sys_multi, true,
              "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
              "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
              "<|im_start|>assistant\n");
}

static void chatml_keeps_whitespace_verbatim(void)
{
    RENDER_IS(WEFT_CHAT_CHATML, conv_spaces, true,
              "<|im_start|>system\n  Be brief. <|im_end|>\n<|im_start|>user\n  Hi there \n<|im_end|>\n"
              "<|im_start|>assistant\n Sure. \n\n<|im_end|>\n<|im_start|>user\n\tok <|im_end|>\n"
              "<|im_start|>assistant\n");
}

static void chatml_with_smollm_default_system_matches_template(void)
{
    const char *smol_tmpl =
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
        "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
        "{% endif %}";
    const char *sys = weft_chat_default_system(smol_tmpl);
    CHECK(sys && strcmp(sys, "You are a helpful AI assistant named SmolLM, trained by Hugging Face") == 0);
    CHECK(weft_chat_default_system("{{'<|im_start|>' + message['role'] + '\n'}}") == NULL);
    CHECK(weft_chat_default_system(NULL) == NULL);
    if (!sys)
        return;

    /* the caller prepends it when msgs[0] is not a system message */
    struct weft_chat_msg with_sys[1 + N_(conv_multi)];
    with_sys[0] = (struct weft_chat_msg){ .role = "system", .content = sys };
    memcpy(with_sys + 1, conv_multi, sizeof conv_multi);
    RENDER_IS(WEFT_CHAT_CHATML, with_sys, true,
              "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
              "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
              "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
    struct weft_chat_msg single[2] = { { .role = "system", .content = sys }, conv_single[0] };
    RENDER_IS(WEFT_CHAT_CHATML, single, false,
              "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
              "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
}

static void chatml_empty_conversation(void)
{
    char *got = NULL;
    CHECK_EQ_INT(weft_chat_render(WEFT_CHAT_CHATML, NULL, 0, false, &got), WEFT_OK);
    CHECK(got && got[0] == '\0');
    free(got);
    got = NULL;
    CHECK_EQ_INT(weft_chat_render(WEFT_CHAT_CHATML, NULL, 0, true, &got), WEFT_OK);
    CHECK(got && strcmp(got, "<|im_start|>assistant\n") == 0);
    free(got);
}

static void llama3_renders_multi_turn_with_system(void)
{
    RENDER_IS(WEFT_CHAT_LLAMA3, conv_sys_multi, false,
              "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>");
    RENDER_IS(WEFT_CHAT_LLAMA3, conv_sys_multi, true,
              "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void llama3_renders_without_system(void)
{
    RENDER_IS(WEFT_CHAT_LLAMA3, conv_multi, true,
              "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n");
    RENDER_IS(WEFT_CHAT_LLAMA3, conv_single, false,
              "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>");
}

static void llama3_trims_content(void)
{
    RENDER_IS(WEFT_CHAT_LLAMA3, conv_spaces, false,
              "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\nSure.<|eot_id|>"
              "<|start_header_id|>user<|end_header_id|>\n\nok<|eot_id|>");
    /* Jinja trim is Python str.strip(): \v and \x1c-\x1f count as space */
    const struct weft_chat_msg odd[] = { { .role = "user", .content = "\x1f X\v\x1c" } };
    RENDER_IS(WEFT_CHAT_LLAMA3, odd, false, "<|start_header_id|>user<|end_header_id|>\n\nX<|eot_id|>");
}

static void llama2_folds_system_into_first_user_turn(void)
{
    const char *want = "[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello! </s><s>[INST] Bye [/INST]";
    RENDER_IS(WEFT_CHAT_LLAMA2, conv_sys_multi, false, want);
    RENDER_IS(WEFT_CHAT_LLAMA2, conv_sys_multi, true, want);   /* no generation prompt in Llama-2 */
}

static void llama2_renders_without_system(void)
{
    RENDER_IS(WEFT_CHAT_LLAMA2, conv_multi, true, "[INST] Hi [/INST] Hello! </s><s>[INST] Bye [/INST]");
    RENDER_IS(WEFT_CHAT_LLAMA2, conv_single, false, "[INST] What is 2+2? [/INST]");
    /* the llama.cpp wiki's rendering of the same template (FusionNet) */
    const struct weft_chat_msg hist[] = {
        { .role = "system", .content = "test" }, { .role = "user", .content = "hello" },
        { .role = "assistant", .content = "response" },
        { .role = "user", .content = "again" }, { .role = "assistant", .content = "response" },
    };
    RENDER_IS(WEFT_CHAT_LLAMA2, hist, false,
              "[INST] <<SYS>>\ntest\n<</SYS>>\n\nhello [/INST] response </s><s>[INST] again [/INST] response </s>");
}

static void llama2_strips_turns_as_a_whole(void)
{
    /* .strip() applies to "<<SYS>>..." + user, so the system text keeps its spaces */
    RENDER_IS(WEFT_CHAT_LLAMA2, conv_spaces, false,
              "[INST] <<SYS>>\n  Be brief. \n<</SYS>>\n\n  Hi there [/INST] Sure. </s><s>[INST] ok [/INST]");
}

static void llama2_later_or_trailing_system_goes_to_a_user_turn(void)
{
    /* beyond the reference template (which rejects these): documented weft behaviour */
    const struct weft_chat_msg mid[] = {
        { .role = "user", .content = "Hi" }, { .role = "assistant", .content = "Hello" },
        { .role = "system", .content = "Be nice" }, { .role = "user", .content = "Bye" },
    };
    RENDER_IS(WEFT_CHAT_LLAMA2, mid, false,
              "[INST] Hi [/INST] Hello </s><s>[INST] <<SYS>>\nBe nice\n<</SYS>>\n\nBye [/INST]");
    const struct weft_chat_msg only_sys[] = { { .role = "system", .content = "S" } };
    RENDER_IS(WEFT_CHAT_LLAMA2, only_sys, true, "[INST] <<SYS>>\nS\n<</SYS>> [/INST]");
}

static void unknown_role_rejected(void)
{
    const struct weft_chat_msg bad[] = { { .role = "user", .content = "Hi" }, { .role = "robot", .content = "42" } };
    const enum weft_chat_style styles[] = { WEFT_CHAT_CHATML, WEFT_CHAT_LLAMA2, WEFT_CHAT_LLAMA3 };
    for (size_t i = 0; i < N_(styles); i++) {
        char *out = (char *)"sentinel";
        CHECK_EQ_INT(weft_chat_render(styles[i], bad, 2, true, &out), WEFT_ERR_INVALID_ARG);
        CHECK(out == NULL);
        CHECK(strstr(weft_last_error(), "robot") != NULL);
    }
    const struct weft_chat_msg no_role[] = { { .role = NULL, .content = "x" } };
    const struct weft_chat_msg no_content[] = { { .role = "user", .content = NULL } };
    char *out = NULL;
    CHECK_EQ_INT(weft_chat_render(WEFT_CHAT_CHATML, no_role, 1, false, &out), WEFT_ERR_INVALID_ARG);
    CHECK_EQ_INT(weft_chat_render(WEFT_CHAT_CHATML, no_content, 1, false, &out), WEFT_ERR_INVALID_ARG);
    CHECK_EQ_INT(weft_chat_render(WEFT_CHAT_CHATML, NULL, 1, false, &out), WEFT_ERR_INVALID_ARG);
    CHECK_EQ_INT(weft_chat_render(WEFT_CHAT_CHATML, conv_single, 1, false, NULL), WEFT_ERR_INVALID_ARG);
    CHECK_EQ_INT(weft_chat_render((enum weft_chat_style)99, conv_single, 1, false, &out),
                 WEFT_ERR_INVALID_ARG);
    CHECK(out == NULL);
}

static void detect_from_template_snippets(void)
{
    /* Qwen2.5-style ChatML */
    CHECK_EQ_INT(weft_chat_detect("{%- for message in messages %}{{- '<|im_start|>' + message.role + "
                                  "'\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}"),
                 WEFT_CHAT_CHATML);
    /* Meta-Llama-3-8B-Instruct */
    CHECK_EQ_INT(weft_chat_detect("{% set loop_messages = messages %}{% for message in loop_messages %}"
                                  "{% set content = '<|start_header_id|>' + message['role'] + "
                                  "'<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}"
                                  "{% endfor %}"),
                 WEFT_CHAT_LLAMA3);
    /* Llama-2-chat-hf */
    CHECK_EQ_INT(weft_chat_detect("{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + "
                                  "content.strip() + ' [/INST]' }}{% endif %}"),
                 WEFT_CHAT_LLAMA2);
    /* ChatML wins over a stray [INST] mention */
    CHECK_EQ_INT(weft_chat_detect("<|im_start|> ... [INST]"), WEFT_CHAT_CHATML);
    /* absent or unrecognised (Gemma) -> ChatML */
    CHECK_EQ_INT(weft_chat_detect(NULL), WEFT_CHAT_CHATML);
    CHECK_EQ_INT(weft_chat_detect(""), WEFT_CHAT_CHATML);
    CHECK_EQ_INT(weft_chat_detect("{{ '<start_of_turn>' + role + '\\n' }}"), WEFT_CHAT_CHATML);
}

static void style_names(void)
{
    CHECK(strcmp(weft_chat_style_name(WEFT_CHAT_CHATML), "chatml") == 0);
    CHECK(strcmp(weft_chat_style_name(WEFT_CHAT_LLAMA2), "llama2") == 0);
    CHECK(strcmp(weft_chat_style_name(WEFT_CHAT_LLAMA3), "llama3") == 0);
}

/* Tools as Qwen2.5's template renders them (Hermes <tool_call> frame). */
static void chatml_renders_tools_calls_and_results(void)
{
    const char *defs[] = { "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
                           "{\"type\": \"object\"}}}" };
    const struct weft_chat_tool_call calls[] = { { "call_1", "get_weather", "{\"city\": \"Oslo\"}" },
                                                 { "call_2", "get_weather", "{\"city\": \"Rome\"}" } };
    const struct weft_chat_msg conv[] = {
        { "system", "Be brief.", NULL, 0, NULL, NULL },
        { "user", "Weather?", NULL, 0, NULL, NULL },
        { "assistant", NULL, calls, 2, NULL, NULL },
        { "tool", "3 C", NULL, 0, "call_1", NULL },
        { "tool", "18 C", NULL, 0, "call_2", NULL },
    };
    char *out = NULL;
    CHECK_EQ_INT(weft_chat_render_tools(WEFT_CHAT_CHATML, conv, 5, defs, 1, true, &out), WEFT_OK);
    const char *want =
        "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
        "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\"}}}"
        "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
        "<args-json-object>}\n</tool_call><|im_end|>\n"
        "<|im_start|>user\nWeather?<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"
        "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\n3 C\n</tool_response>\n<tool_response>\n18 C\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n";
    CHECK_MSG(out && strcmp(out, want) == 0, "got:\n%s", out ? out : "(null)");
    free(out);
    /* without a system message the tools section is the system message */
    CHECK_EQ_INT(weft_chat_render_tools(WEFT_CHAT_CHATML, conv + 1, 1, defs, 1, true, &out), WEFT_OK);
    CHECK(out && strncmp(out, "<|im_start|>system\n# Tools\n\n", 28) == 0);
    free(out);
    /* no tools, no tool messages: the plain rendering */
    char *plain = NULL;
    CHECK_EQ_INT(weft_chat_render_tools(WEFT_CHAT_CHATML, conv, 2, NULL, 0, true, &out), WEFT_OK);
    CHECK_EQ_INT(weft_chat_render(WEFT_CHAT_CHATML, conv, 2, true, &plain), WEFT_OK);
    CHECK(out && plain && strcmp(out, plain) == 0);
    free(out);
    free(plain);
}

static void llama3_renders_tools_in_the_first_user_message(void)
{
    const char *defs[] = { "{\"type\": \"function\", \"function\": {\"name\": \"f\"}}" };
    const struct weft_chat_tool_call call = { NULL, "f", "{\"x\": 1}" };
    const struct weft_chat_msg conv[] = {
        { "user", "Go", NULL, 0, NULL, NULL },
        { "assistant", NULL, &call, 1, NULL, NULL },
        { "tool", "done", NULL, 0, NULL, NULL },
    };
    char *out = NULL;
    CHECK_EQ_INT(weft_chat_render_tools(WEFT_CHAT_LLAMA3, conv, 3, defs, 1, true, &out), WEFT_OK);
    const char *want =
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please respond with a JSON for "
        "a function call with its proper arguments that best answers the given prompt.\n\nRespond in the format "
        "{\"name\": function name, \"parameters\": dictionary of argument name and its value}.Do not use "
        "variables.\n\n{\"type\": \"function\", \"function\": {\"name\": \"f\"}}\n\nGo<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"f\", \"parameters\": {\"x\": 1}}<|eot_id|>"
        "<|start_header_id|>ipython<|end_header_id|>\n\ndone<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n";
    CHECK_MSG(out && strcmp(out, want) == 0, "got:\n%s", out ? out : "(null)");
    free(out);
}

static void tools_refused_where_the_template_has_no_format(void)
{
    const char *defs[] = { "{}" };
    const struct weft_chat_msg conv[] = { { "user", "Go", NULL, 0, NULL, NULL } };
    const struct weft_chat_msg result[] = { { "tool", "x", NULL, 0, NULL, NULL } };
    const struct weft_chat_msg no_args[] = { { "assistant", NULL, &(struct weft_chat_tool_call){ NULL, "f", NULL },
                                               1, NULL, NULL } };
    char *out = (char *)"sentinel";
    CHECK_EQ_INT(weft_chat_render_tools(WEFT_CHAT_LLAMA2, conv, 1, defs, 1, true, &out), WEFT_ERR_INVALID_ARG);
    CHECK(out == NULL && strstr(weft_last_error(), "llama2"));
    CHECK_EQ_INT(weft_chat_render(WEFT_CHAT_LLAMA2, result, 1, true, &out), WEFT_ERR_INVALID_ARG);
    CHECK_EQ_INT(weft_chat_render(WEFT_CHAT_CHATML, no_args, 1, true, &out), WEFT_ERR_INVALID_ARG);
    const char *o, *m, *e;
    weft_chat_tool_call_frame(WEFT_CHAT_LLAMA2, &o, &m, &e);
    CHECK(!o && !m && !e);
    weft_chat_tool_call_frame(WEFT_CHAT_CHATML, &o, &m, &e);
    CHECK(o && strcmp(o, "<tool_call>\n{\"name\": \"") == 0 && strcmp(e, "}\n</tool_call>") == 0);
}

int main(void)
{
    RUN(chatml_renders_multi_turn_with_system);
    RUN(chatml_keeps_whitespace_verbatim);
    RUN(chatml_with_smollm_default_system_matches_template);
    RUN(chatml_empty_conversation);
    RUN(llama3_renders_multi_turn_with_system);
    RUN(llama3_renders_without_system);
    RUN(llama3_trims_content);
    RUN(llama2_folds_system_into_first_user_turn);
    RUN(llama2_renders_without_system);
    RUN(llama2_strips_turns_as_a_whole);
    RUN(llama2_later_or_trailing_system_goes_to_a_user_turn);
    RUN(unknown_role_rejected);
    RUN(chatml_renders_tools_calls_and_results);
    RUN(llama3_renders_tools_in_the_first_user_message);
    RUN(tools_refused_where_the_template_has_no_format);
    RUN(detect_from_template_snippets);
    RUN(style_names);
    return check_summary();
}
