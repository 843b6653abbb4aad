// `magnetar chat`: interactive multi-turn chat (protocol §7.1 REPL).
//
// The conversation is kept as a token transcript: `base` (BOS, Think Max prefix, system text)
// followed by the turns, each `<｜User｜>text<｜Assistant｜><think>|</think>`, the generated
// tokens and EOS. Both pieces are rendered with Engine::render_chat; the generated tokens are
// kept as sampled (not re-tokenized), so every turn's prompt extends the previous one and
// Session::sync prefills only the new suffix. docs/cli.md documents the commands and the
// /save file.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/generation.h"
#include "cli/line_reader.h"
#include "core/format.h"
#include "magnetar/engine.h"

namespace magnetar::cli {

namespace {

constexpr const char* kPrompt = "magnetar> ";
constexpr const char* kContinuation = "....... ";
constexpr const char* kSaveMagic = "magnetar-chat 1";

const char* mode_name(think_mode m) {
    switch (m) {
        case think_mode::off:
            return "off";
        case think_mode::on:
            return "on";
        case think_mode::max:
            return "max";
    }
    return "on";
}

think_mode parse_mode(const std::string& s) {
    if (s == "off") return think_mode::off;
    if (s == "max") return think_mode::max;
    if (s == "on") return think_mode::on;
    throw std::runtime_error("unknown thinking mode \"" + s + "\"");
}

class chat {
  public:
    chat(const Engine& engine, common_flags& f) : engine_(engine), f_(f) {
        tty_ = color_output(f);
        make_session();
    }

    // Runs the REPL until /quit, /exit or the end of input.
    int repl() {
        line_reader in(default_history_file());
        std::fprintf(
            stderr, "magnetar chat: %s, context %lld, thinking %s. /help lists the commands.\n",
            engine_.info().name.c_str(), static_cast<long long>(f_.n_ctx), mode_name(f_.mode));
        std::string line;
        while (read_message(in, kPrompt, kContinuation, &line)) {
            line = trim_line(line);
            if (line.empty()) continue;
            try {
                if (line[0] == '/') {
                    if (!command(line)) break;
                } else {
                    turn(line);
                }
            } catch (const std::exception& e) {
                std::fprintf(stderr, "magnetar: error: %s\n", e.what());
            }
        }
        // Ctrl+D at the prompt: end the prompt's line, so the shell's starts on its own.
        if (in.interactive()) std::printf("\n");
        return 0;
    }

  private:
    // ---- commands ------------------------------------------------------------------------

    // False to leave the REPL.
    bool command(const std::string& line) {
        const size_t sp = line.find(' ');
        const std::string cmd = line.substr(0, sp);
        const std::string arg = sp == std::string::npos ? "" : trim_line(line.substr(sp + 1));
        if (cmd == "/quit" || cmd == "/exit") return false;
        if (cmd == "/help") {
            std::printf(
                "/help          this list\n"
                "/think         thinking on (normal effort)\n"
                "/think-max     Think Max (needs a context of at least %lld)\n"
                "/nothink       thinking off\n"
                "/ctx N         new context size (the conversation is kept)\n"
                "/clear         forget the conversation (the settings stay)\n"
                "/system [TEXT] show or set the system prompt (\"\" removes it)\n"
                "/read FILE     send a file's contents as the next message\n"
                "/save FILE     save the conversation and the session state\n"
                "/load FILE     continue a saved conversation\n"
                "/quit, /exit   leave (so does Ctrl+D)\n"
                "A line that ends with \\ continues on the next one.\n"
                "Ctrl+C stops a reply and returns to the prompt.\n",
                static_cast<long long>(kThinkMaxMinCtx));
        } else if (cmd == "/think" || cmd == "/think-max" || cmd == "/nothink") {
            f_.mode = cmd == "/think"       ? think_mode::on
                      : cmd == "/think-max" ? think_mode::max
                                            : think_mode::off;
            const think_mode eff = effective_mode(f_.mode, f_.n_ctx, true);
            std::printf("thinking: %s\n", mode_name(eff));
        } else if (cmd == "/ctx") {
            int64_t n = 0;
            try {
                n = std::stoll(arg);
            } catch (const std::exception&) {
                n = 0;
            }
            if (n < 16) throw std::runtime_error("/ctx needs a number of tokens >= 16");
            f_.n_ctx = n;
            make_session();
            const session_memory m = session_->memory();
            std::printf("context: %lld tokens, cache %s\n", static_cast<long long>(n),
                        human_bytes(m.cache_bytes() + m.scratch_bytes).c_str());
        } else if (cmd == "/clear") {
            clear_conversation();
            std::printf("conversation cleared\n");
        } else if (cmd == "/system") {
            if (arg.empty()) {
                std::printf("system prompt: %s\n",
                            f_.system.empty() ? "(none)" : ("\"" + f_.system + "\"").c_str());
            } else {
                f_.system = arg == "\"\"" ? "" : arg;
                std::printf("system prompt %s (the conversation is kept)\n",
                            f_.system.empty() ? "removed" : "set");
            }
        } else if (cmd == "/read") {
            if (arg.empty()) throw std::runtime_error("/read needs a file name");
            turn(read_text_file(arg));
        } else if (cmd == "/save") {
            if (arg.empty()) throw std::runtime_error("/save needs a file name");
            save(arg);
        } else if (cmd == "/load") {
            if (arg.empty()) throw std::runtime_error("/load needs a file name");
            load(arg);
        } else {
            std::printf("unknown command %s; /help lists the commands\n", cmd.c_str());
        }
        std::fflush(stdout);
        return true;
    }

    // The conversation forgotten; the session keeps its prefix (BOS, system) for the next turn.
    void clear_conversation() {
        body_.clear();
        turns_.clear();
    }

    void make_session() {
        session_.reset();
        session_options so;
        so.n_ctx = f_.n_ctx;
        so.chunk_size = f_.chunk;
        so.mtp_logits = mtp_probe(f_, engine_);
        so.drafts = f_.engine.mtp_draft >= 2;
        check(engine_.create_session(so, &session_));
    }

    // ---- one turn ------------------------------------------------------------------------

    // The rendered conversation `system + user` split into the part before the user turn
    // (BOS, Think Max prefix, system) and the user turn with the assistant opening.
    std::pair<std::string, std::string> render_split(const std::string& user, think_mode mode) {
        std::vector<chat_turn> turns;
        if (!f_.system.empty()) turns.push_back({"system", f_.system, ""});
        turns.push_back({"user", user, ""});
        const std::string full =
            Engine::render_chat(turns, mode, static_cast<uint64_t>(f_.n_ctx), true);
        const special_tokens& sp = engine_.info().special;
        const std::string marker =
            engine_.token_bytes(sp.user) + user + engine_.token_bytes(sp.assistant);
        const size_t pos = full.rfind(marker);
        if (pos == std::string::npos) {
            throw std::runtime_error("chat template: the user turn was not found in the render");
        }
        return {full.substr(0, pos), full.substr(pos)};
    }

    void turn(const std::string& user) {
        const think_mode mode = effective_mode(f_.mode, f_.n_ctx, false);
        const auto [base_text, turn_text] = render_split(user, mode);
        if (base_text != base_text_) {  // first turn, or the system / Think Max prefix changed
            std::vector<int32_t> ids;
            check(engine_.tokenize(base_text, true, &ids));
            base_ = std::move(ids);
            base_text_ = base_text;
        }
        std::vector<int32_t> suffix;
        check(engine_.tokenize(turn_text, true, &suffix));
        std::vector<int32_t> prompt = base_;
        prompt.insert(prompt.end(), body_.begin(), body_.end());
        prompt.insert(prompt.end(), suffix.begin(), suffix.end());

        const special_tokens& sp = engine_.info().special;
        token_printer printer(engine_, stdout, tty_);
        printer.begin(!suffix.empty() && suffix.back() == sp.think);
        generation g;
        g.sampling = f_.sampling;
        g.n_predict = predict_limit(f_.n_predict);
        g.stop_at_eos = !f_.ignore_eos;
        g.eos = sp.eos;
        g.progress = isatty(STDERR_FILENO) != 0;
        g.on_token = [&printer](int32_t id) { printer.push(id); };
        g.stops = f_.stops;
        g.token_bytes = [&](int32_t id) { return engine_.token_bytes(id); };
        g.on_partial = [&printer](int32_t id, size_t n) { printer.push_partial(id, n); };
        g.mtp_draft = f_.engine.mtp_draft;
        g.mtp_margin = f_.engine.mtp_margin;
        clear_interrupt();
        const status st = run_generation(*session_, prompt, g);
        printer.end();
        const bool interrupted_now = g.cancelled;
        clear_interrupt();
        if (!st.ok()) {
            const char* hint = st.code() == status_code::context_full
                                   ? "; /ctx N gives a larger context, /clear starts over"
                                   : "";
            throw std::runtime_error(st.message() + " (the message was not added)" + hint);
        }
        if (interrupted_now && g.tokens.empty()) {
            std::printf("(interrupted: the message was not added)\n");
            std::fflush(stdout);
            return;
        }
        if (interrupted_now) std::printf("(interrupted)\n");
        body_.insert(body_.end(), suffix.begin(), suffix.end());
        body_.insert(body_.end(), g.tokens.begin(), g.tokens.end());
        body_.push_back(sp.eos);
        turns_.push_back({"user", user, ""});
        turns_.push_back({"assistant", printer.content(), printer.reasoning()});
        std::fflush(stdout);
        print_timing(g);
    }

    // ---- /save and /load -----------------------------------------------------------------

    void save(const std::string& path) {
        nlohmann::json j;
        j["model"] = engine_.info().name;
        j["n_vocab"] = engine_.info().n_vocab;
        j["n_ctx"] = f_.n_ctx;
        j["think"] = mode_name(f_.mode);
        j["system"] = f_.system;
        j["base"] = base_;
        j["body"] = body_;
        j["base_text"] = base_text_;
        nlohmann::json turns = nlohmann::json::array();
        for (const chat_turn& t : turns_) {
            turns.push_back({{"role", t.role}, {"content", t.content}, {"reasoning", t.reasoning}});
        }
        j["turns"] = turns;
        const uint64_t n = session_->payload_size();
        j["payload_bytes"] = n;
        std::ofstream out(path, std::ios::binary | std::ios::trunc);
        if (!out) throw std::runtime_error(path + ": cannot create");
        out << kSaveMagic << "\n"
            << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        check(session_->save_payload([&out](const void* data, size_t size) {
            out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
            return static_cast<bool>(out);
        }));
        out.close();
        if (!out) throw std::runtime_error(path + ": write error");
        std::printf("saved %zu turns, %lld tokens (%s of session state) to %s\n", turns_.size(),
                    static_cast<long long>(base_.size() + body_.size()), human_bytes(n).c_str(),
                    path.c_str());
    }

    void load(const std::string& path) {
        std::ifstream in(path, std::ios::binary);
        if (!in) throw std::runtime_error(path + ": cannot open");
        std::string magic, header;
        if (!std::getline(in, magic) || magic != kSaveMagic || !std::getline(in, header)) {
            throw std::runtime_error(path + ": not a magnetar chat file");
        }
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(header);
        } catch (const std::exception& e) {
            throw std::runtime_error(path + ": bad header: " + e.what());
        }
        if (j.value("n_vocab", 0u) != engine_.info().n_vocab) {
            throw std::runtime_error(path + ": saved with another model (" +
                                     j.value("model", std::string("?")) + ")");
        }
        common_flags next = f_;
        next.n_ctx = j.at("n_ctx").get<int64_t>();
        next.mode = parse_mode(j.at("think").get<std::string>());
        next.system = j.at("system").get<std::string>();
        std::vector<int32_t> base = j.at("base").get<std::vector<int32_t>>();
        std::vector<int32_t> body = j.at("body").get<std::vector<int32_t>>();
        std::vector<chat_turn> turns;
        for (const auto& t : j.at("turns")) {
            turns.push_back({t.at("role").get<std::string>(), t.at("content").get<std::string>(),
                             t.at("reasoning").get<std::string>()});
        }
        const uint64_t n = j.at("payload_bytes").get<uint64_t>();

        if (next.n_ctx != f_.n_ctx) {
            f_.n_ctx = next.n_ctx;
            make_session();
        }
        const status st = session_->load_payload(
            [&in](void* data, size_t size) {
                in.read(static_cast<char*>(data), static_cast<std::streamsize>(size));
                return static_cast<size_t>(in.gcount()) == size;
            },
            n);
        check(st);
        f_.mode = next.mode;
        f_.system = next.system;
        base_ = std::move(base);
        body_ = std::move(body);
        turns_ = std::move(turns);
        base_text_ = j.value("base_text", std::string());
        std::printf("loaded %zu turns, %lld tokens from %s (context %lld, thinking %s)\n",
                    turns_.size(), static_cast<long long>(base_.size() + body_.size()),
                    path.c_str(), static_cast<long long>(f_.n_ctx), mode_name(f_.mode));
    }

    const Engine& engine_;
    common_flags& f_;
    bool tty_ = false;
    std::unique_ptr<Session> session_;
    std::string base_text_;         // rendered BOS [Think Max prefix] [system]
    std::vector<int32_t> base_;     // its tokens
    std::vector<int32_t> body_;     // the turns, each ending with EOS
    std::vector<chat_turn> turns_;  // the same turns as text (saved for reference)
};

int run_chat(common_flags& f) {
    const auto engine = load_engine(f);
    effective_mode(f.mode, f.n_ctx, true);
    install_interrupt_handler();
    chat c(*engine, f);
    return c.repl();
}

action setup(CLI::App& sub) {
    auto f = std::make_shared<common_flags>();
    add_common_flags(sub, *f);
    sub.footer(
        "Interactive chat; each turn prefills only its new tokens. Commands: /help, /think, "
        "/think-max, /nothink, /ctx N, /clear, /system [TEXT], /read FILE, /save FILE, /load FILE, "
        "/quit. A line ending with \\ continues on the next. Ctrl+C stops a reply. See "
        "docs/cli.md.");
    return [f]() { return run_chat(*f); };
}

}  // namespace

MAGNETAR_COMMAND(chat, "chat", "Interactive multi-turn chat", setup);

}  // namespace magnetar::cli
