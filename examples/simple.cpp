// The smallest use of the public API: load a model, render and tokenize one chat turn (client
// text never becomes control tokens), sync a session to it and sample until EOS. Usage:
// magnetar_simple MODEL.gguf [PROMPT] [MAX_TOKENS]
#include <cstdio>
#include <string>

#include "magnetar/engine.h"

int main(int argc, char** argv) {
    using namespace magnetar;
    if (argc < 2) return std::fprintf(stderr, "usage: %s MODEL.gguf [PROMPT] [N]\n", argv[0]), 2;
    engine_options eo;
    eo.model_path = argv[1];
    std::unique_ptr<Engine> engine;
    std::unique_ptr<Session> session;
    status st = Engine::load(eo, &engine);
    if (st) st = engine->create_session(session_options{}, &session);
    std::vector<int32_t> prompt;
    if (st) {
        st = engine->tokenize_chat({{"user", argc > 2 ? argv[2] : "Hello!", ""}}, think_mode::off,
                                   session_options{}.n_ctx, &prompt);
    }
    if (st) st = session->sync(prompt);
    sampler smp(sampling_params{.seed = 42});
    for (int i = 0, n = argc > 3 ? std::stoi(argv[3]) : 64; st && i < n; ++i) {
        const int32_t id = session->sample(smp);
        if (id == engine->info().special.eos) break;
        std::fputs(engine->token_bytes(id).c_str(), stdout);
        st = session->eval({&id, 1});
    }
    std::printf("\n");
    if (!st) return std::fprintf(stderr, "error: %s\n", st.message().c_str()), 1;
    return 0;
}
