// `magnetar agent`: the native coding agent in the terminal.
//
// A prompt line (libedit on a terminal), the reply streamed above it (reasoning dimmed, the
// answer's markdown shown with terminal attributes by markdown_stream.h, tool calls as one
// line each with a one-line result), a status line after each turn (context use, prefill and
// generation figures), a prefill bar for long evaluations. Ctrl+C interrupts the reply or the
// tool round; Ctrl+D on an empty line leaves. The loop itself is tools/agent/agent.h, saving
// tools/agent/library.h; docs/agent.md documents the commands.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/library.h"
#include "agent/tools.h"
#include "cli/busy_terminal.h"
#include "cli/command.h"
#include "cli/generation.h"
#include "cli/line_reader.h"
#include "cli/markdown_stream.h"
#include "core/format.h"
#include "core/progress.h"

namespace magnetar::cli {

namespace {

namespace fs = std::filesystem;

constexpr const char* kPrompt = "agent> ";
constexpr const char* kContinuation = "...... ";

struct agent_flags {
    common_flags common;
    std::string prompt;  // -p: one turn, then exit
    std::string trace;
    std::string sessions;
    std::string workdir;
    std::vector<std::string> allow;
    int max_steps = 32;
    int64_t kv_space_mb = 4096;
};

std::string default_sessions_dir() {
    if (const char* d = std::getenv("MAGNETAR_AGENT_DIR"); d && *d) return d;
    if (const char* x = std::getenv("XDG_DATA_HOME"); x && *x) {
        return std::string(x) + "/magnetar/agent";
    }
    if (const char* h = std::getenv("HOME"); h && *h) {
        return std::string(h) + "/.local/share/magnetar/agent";
    }
    return {};
}

chat::think_mode chat_mode(think_mode m) {
    switch (m) {
        case think_mode::off:
            return chat::think_mode::nothink;
        case think_mode::on:
            return chat::think_mode::think;
        case think_mode::max:
            return chat::think_mode::think_max;
    }
    return chat::think_mode::think;
}

// The first line of a text, cut to `n` characters.
std::string first_line(const std::string& s, size_t n) {
    std::string l = s.substr(0, s.find('\n'));
    if (l.size() > n) l = l.substr(0, n - 3) + "...";
    return l;
}

class terminal_agent {
  public:
    terminal_agent(const Engine& engine, agent_flags& f)
        : engine_(engine),
          f_(f),
          tty_(color_output(f.common)),
          tools_(f.workdir.empty() ? fs::current_path() : fs::path(f.workdir),
                 std::vector<fs::path>(f.allow.begin(), f.allow.end())) {
        md_ = markdown_stream(tty_);
        agent::agent_options o;
        o.n_ctx = f.common.n_ctx;
        o.chunk = f.common.chunk;
        o.mode = chat_mode(effective_mode(f.common.mode, f.common.n_ctx, true));
        o.system = f.common.system;
        o.sampling = f.common.sampling;
        o.max_steps = f.max_steps;
        if (f.common.n_opt && f.common.n_opt->count() > 0) {
            o.max_reply_tokens = predict_limit(f.common.n_predict);
        }
        agent_ = std::make_unique<agent::agent>(engine, tools_, o);
        if (!f.trace.empty()) {
            trace_.open(f.trace, std::ios::app);
            if (!trace_) throw std::runtime_error(f.trace + ": cannot open the trace file");
        }
        const std::string dir = f.sessions.empty() ? default_sessions_dir() : f.sessions;
        if (!dir.empty()) {
            lib_ = std::make_unique<agent::library>(
                dir, engine, static_cast<uint64_t>(f.kv_space_mb) << 20,
                [this](const std::string& l) {
                    // Saves are routine (the trace has them); removals and failures are not.
                    if (trace_.is_open()) trace_line({{"event", "kv"}, {"line", l}});
                    if (l.find(": saved ") == std::string::npos) {
                        std::fprintf(stderr, "magnetar: %s\n", l.c_str());
                    }
                });
        }
    }

    int one_shot(const std::string& prompt) {
        start_base();
        const bool ok = turn(prompt);
        return ok ? 0 : 1;
    }

    int repl() {
        line_reader in(default_history_file());
        interactive_ = in.interactive();
        busy_.enable(interactive_);
        std::fprintf(stderr,
                     "magnetar agent: %s, context %lld, thinking %s, working in %s. /help lists "
                     "the commands.\n",
                     engine_.info().name.c_str(), static_cast<long long>(f_.common.n_ctx),
                     agent_->conversation().thinking() ? "on" : "off",
                     tools_.space().root().string().c_str());
        start_base();
        std::string line;
        for (;;) {
            // Messages typed while the last turn ran go first, shown as if typed at the prompt.
            if (std::optional<std::string> next = queued()) {
                line = *next;
                std::printf("%s%s\n", kPrompt, line.c_str());
            } else if (!read_message(in, kPrompt, kContinuation, &line, take_edit())) {
                break;
            }
            line = trim_line(line);
            if (line.empty()) continue;
            try {
                if (line[0] == '/') {
                    if (!command(line, in)) return 0;
                } else {
                    turn(line);
                }
            } catch (const std::exception& e) {
                std::fprintf(stderr, "magnetar: error: %s\n", e.what());
            }
        }
        if (interactive_) std::printf("\n");
        leave(in);
        return 0;
    }

  private:
    // The system prompt's state: from the disk cache when stored, else evaluated and stored.
    void start_base() {
        Session& s = agent_->session();
        const agent::transcript& t = agent_->conversation();
        int64_t loaded = lib_ ? lib_->load_state(t, s) : 0;
        if (loaded == static_cast<int64_t>(t.tokens().size())) {
            note("system prompt and tools: " + std::to_string(loaded) +
                 " tokens, state loaded from the disk cache");
        } else {
            agent_->sync(events());
            note("system prompt and tools: " + std::to_string(t.tokens().size()) +
                 " tokens evaluated in " + strfmt("%.2f", agent_->last_step().prefill_s) + " s");
            if (lib_) lib_->save_base(t, s);
        }
        if (s.checkpoint_positions().empty() || s.checkpoint_positions().back() != s.n_past()) {
            check(s.checkpoint());
        }
        base_pos_ = s.n_past();
    }

    void note(const std::string& s) {
        std::fprintf(stderr, "%s%s%s\n", tty_ ? "\x1b[2m" : "", s.c_str(), tty_ ? "\x1b[0m" : "");
    }

    // The next message typed ahead, unless the last turn was stopped with Ctrl+C: then the
    // first one waits in the prompt line to be edited (take_edit) and the rest stay queued.
    std::optional<std::string> queued() {
        const std::lock_guard<std::mutex> lk(busy_.mutex());
        type_ahead& in = busy_.input();
        if (stopped_) {
            stopped_ = false;
            if (std::optional<std::string> first = in.pop()) {
                edit_ = *first;
                return std::nullopt;
            }
        }
        if (!edit_.empty()) return std::nullopt;
        std::optional<std::string> next = in.pop();
        if (!next) edit_ = in.take_draft();  // typed without Enter: into the prompt line
        return next;
    }

    std::string take_edit() {
        std::string s = std::move(edit_);
        edit_.clear();
        return s;
    }

    long long used() const { return static_cast<long long>(agent_->session().n_past()); }

    agent::agent_events events() {
        agent::agent_events ev;
        ev.cancel = [this] { return interrupted() || busy_.send_now(); };
        ev.token = [this](int64_t n, double s) {
            const std::lock_guard<std::mutex> lk(busy_.mutex());
            busy_.show(strfmt("generating, %.1f t/s", s > 0 ? static_cast<double>(n) / s : 0.0),
                       used());
        };
        ev.prefill = [this](int64_t done, int64_t total) {
            const std::lock_guard<std::mutex> lk(busy_.mutex());
            busy_.show(strfmt("prefill %lld/%lld", static_cast<long long>(done),
                              static_cast<long long>(total)),
                       static_cast<long long>(done));
            if (!bar_) {
                if (!isatty(STDERR_FILENO) || total - done < 64) return;
                bar_start_ = done;
                bar_ = std::make_unique<Progress>("prefill", static_cast<uint64_t>(total - done),
                                                  Progress::Unit::tokens);
            }
            bar_->update(static_cast<uint64_t>(done - bar_start_));
        };
        ev.stream = [this](const chat::stream_event& e) {
            const std::lock_guard<std::mutex> lk(busy_.mutex());
            stream(e);
        };
        ev.tool_start = [this](const std::string& name, const nlohmann::ordered_json& args) {
            const std::lock_guard<std::mutex> lk(busy_.mutex());
            busy_.show("running " + name, used());
            end_reply_line();
            std::string a;
            for (const auto& [k, v] : args.items()) {
                std::string s = v.is_string() ? v.get<std::string>() : v.dump();
                a += (a.empty() ? "" : " ") + k + "=" + first_line(s, 50);
            }
            std::printf("%s-> %s %s%s\n", tty_ ? "\x1b[36m" : "", name.c_str(), a.c_str(),
                        tty_ ? "\x1b[0m" : "");
            std::fflush(stdout);
        };
        ev.tool_end = [this](const std::string&, const agent::tool_result& r) {
            const std::lock_guard<std::mutex> lk(busy_.mutex());
            size_t lines = 0;
            for (char c : r.text) lines += c == '\n';
            std::string head = first_line(r.text, 70);
            if (!r.ok && head.rfind("error: ", 0) != 0) head = "error: " + head;
            if (r.ok) head = "ok: " + head;
            std::printf("%s   %s (%zu line%s)%s\n", tty_ ? "\x1b[2m" : "", head.c_str(), lines + 1,
                        lines == 0 ? "" : "s", tty_ ? "\x1b[0m" : "");
            std::fflush(stdout);
        };
        ev.note = [this](const std::string& s) {
            const std::lock_guard<std::mutex> lk(busy_.mutex());
            end_reply_line();
            note(s);
        };
        if (trace_.is_open()) ev.trace = [this](const nlohmann::json& e) { trace_line(e); };
        return ev;
    }

    // One --trace record, with the wall-clock time in seconds.
    void trace_line(const nlohmann::json& e) {
        nlohmann::json r = e;
        const auto now = std::chrono::system_clock::now().time_since_epoch();
        r["time"] = static_cast<double>(
                        std::chrono::duration_cast<std::chrono::milliseconds>(now).count()) /
                    1000.0;
        trace_ << r.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        trace_.flush();
    }

    void stream(const chat::stream_event& e) {
        if (bar_) {
            bar_->finish();
            bar_.reset();
        }
        if (e.kind == chat::stream_event_kind::reasoning) {
            if (!in_reasoning_ && tty_) std::fputs("\x1b[90m", stdout);
            in_reasoning_ = true;
            write(e.text);
        } else if (e.kind == chat::stream_event_kind::text) {
            if (in_reasoning_) {
                if (tty_) std::fputs("\x1b[0m", stdout);
                in_reasoning_ = false;
                if (!at_line_start_) write("\n");
            }
            if (!e.text.empty()) {
                const std::string shown = md_.feed(e.text);
                std::fwrite(shown.data(), 1, shown.size(), stdout);
                at_line_start_ = e.text.back() == '\n';
            }
        } else if (e.kind == chat::stream_event_kind::tool_error) {
            end_reply_line();
            note("tool call: " + e.text);
        }
        std::fflush(stdout);
    }

    void write(const std::string& s) {
        if (s.empty()) return;
        std::fwrite(s.data(), 1, s.size(), stdout);
        at_line_start_ = s.back() == '\n';
    }

    void end_reply_line() {
        const std::string held = md_.finish();
        std::fwrite(held.data(), 1, held.size(), stdout);
        if (in_reasoning_ && tty_) std::fputs("\x1b[0m", stdout);
        in_reasoning_ = false;
        if (!at_line_start_) write("\n");
        std::fflush(stdout);
    }

    bool turn(const std::string& text) {
        clear_interrupt();
        at_line_start_ = true;
        busy_.begin(f_.common.n_ctx);
        agent::turn_result r;
        try {
            r = agent_->turn(text, events());
        } catch (...) {
            busy_.end();
            throw;
        }
        const bool sent_now = busy_.send_now();
        stopped_ = r.interrupted && !sent_now;
        busy_.end();
        if (bar_) {
            bar_->finish();
            bar_.reset();
        }
        end_reply_line();
        clear_interrupt();
        dirty_ = true;
        if (title_.empty()) title_ = first_line(text, 60);
        const int64_t used = static_cast<int64_t>(agent_->conversation().tokens().size());
        const auto rate = [](int64_t n, double s) {
            return s > 0 ? static_cast<double>(n) / s : 0.0;
        };
        std::fprintf(stderr,
                     "%s[context %lld/%lld (%.0f%%) | prefill %lld tokens, %.1f t/s | generated "
                     "%lld tokens, %.1f t/s | %d step%s, %d tool call%s%s%s]%s\n",
                     tty_ ? "\x1b[2m" : "", static_cast<long long>(used),
                     static_cast<long long>(f_.common.n_ctx),
                     100.0 * static_cast<double>(used) / static_cast<double>(f_.common.n_ctx),
                     static_cast<long long>(r.total.prefilled),
                     rate(r.total.prefilled, r.total.prefill_s),
                     static_cast<long long>(r.total.generated),
                     rate(r.total.generated, r.total.decode_s), r.steps, r.steps == 1 ? "" : "s",
                     r.calls, r.calls == 1 ? "" : "s", r.interrupted ? ", interrupted" : "",
                     r.compacted ? ", compacted" : "", tty_ ? "\x1b[0m" : "");
        return !r.interrupted;
    }

    // Unsaved work on a terminal: asks whether to save it.
    void leave(line_reader& in) {
        if (dirty_ && lib_ && interactive_) {
            std::string answer;
            if (in.read("Save this session before leaving? [y/N] ", &answer) &&
                (trim_line(answer) == "y" || trim_line(answer) == "Y" ||
                 trim_line(answer) == "yes")) {
                try {
                    save("");
                } catch (const std::exception& e) {
                    std::fprintf(stderr, "magnetar: error: %s\n", e.what());
                }
            }
        } else if (dirty_) {
            note("the session was not saved (/save keeps it)");
        }
    }

    // False to leave.
    bool command(const std::string& line, line_reader& in) {
        const size_t sp = line.find(' ');
        const std::string cmd = line.substr(0, sp);
        const std::string arg = sp == std::string::npos ? "" : trim_line(line.substr(sp + 1));
        if (cmd == "/quit" || cmd == "/exit") {
            leave(in);
            return false;
        }
        if (cmd == "/help") {
            std::printf(
                "/help            this list\n"
                "/save [TITLE]    save the session (its messages and its evaluated state)\n"
                "/list            the saved sessions, latest first\n"
                "/switch PREFIX   continue the saved session whose id starts with PREFIX\n"
                "/history [N]     the last N messages (default 10)\n"
                "/new             start a new session (the current one is kept only if saved)\n"
                "/compact         summarize the conversation now to free context\n"
                "/quit, /exit     leave (asks to save unsaved work; so does Ctrl+D)\n"
                "A line that ends with \\ continues on the next one. Ctrl+C interrupts a reply "
                "or a tool round.\n");
        } else if (cmd == "/save") {
            save(arg);
        } else if (cmd == "/list") {
            need_library();
            const std::vector<agent::saved_info> all = lib_->list();
            if (all.empty()) std::printf("no saved sessions in %s\n", lib_->dir().c_str());
            for (const agent::saved_info& s : all) {
                std::printf("%s  %s  %lld messages, %lld tokens%s  %s\n", s.id.c_str(),
                            when(s.updated).c_str(), static_cast<long long>(s.messages),
                            static_cast<long long>(s.tokens), s.has_state ? "" : " (no state)",
                            s.title.c_str());
            }
        } else if (cmd == "/switch") {
            switch_to(arg);
        } else if (cmd == "/history") {
            history(arg.empty() ? 10 : std::atoi(arg.c_str()));
        } else if (cmd == "/new") {
            agent_->set_conversation(agent_->fresh_conversation());
            back_to_base();
            id_.clear();
            title_.clear();
            dirty_ = false;
            std::printf("new session\n");
        } else if (cmd == "/compact") {
            clear_interrupt();
            if (!agent_->compact(events())) std::printf("nothing to compact\n");
            clear_interrupt();
        } else {
            std::printf("unknown command %s; /help lists the commands\n", cmd.c_str());
        }
        std::fflush(stdout);
        return true;
    }

    static std::string when(uint64_t t) {
        const time_t tt = static_cast<time_t>(t);
        struct tm tm_buf;
        localtime_r(&tt, &tm_buf);
        char buf[32];
        std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm_buf);
        return buf;
    }

    void need_library() {
        if (!lib_) throw std::runtime_error("no sessions folder (set --sessions or $HOME)");
    }

    // The session back at the system prompt's state: the checkpoint when still held, else the
    // disk copy; the next turn evaluates the rest.
    void back_to_base() {
        Session& s = agent_->session();
        for (const int64_t p : s.checkpoint_positions()) {
            if (p == base_pos_) return;  // sync goes back to it
        }
        if (lib_) lib_->load_state(agent_->conversation(), s);
    }

    void save(const std::string& title) {
        need_library();
        if (agent_->conversation().messages().size() < 2) {
            throw std::runtime_error("nothing to save yet");
        }
        clear_interrupt();
        agent_->sync(events());
        if (!title.empty()) title_ = title;
        id_ = lib_->save(id_, title_, agent_->conversation(), agent_->session());
        dirty_ = false;
        std::printf("saved session %s (%zu messages, %zu tokens)\n", id_.c_str(),
                    agent_->conversation().messages().size(),
                    agent_->conversation().tokens().size());
    }

    void switch_to(const std::string& prefix) {
        need_library();
        agent::saved_session s = lib_->find(prefix);
        agent::transcript t = agent::transcript::restore(
            *engine_.vocab(), std::move(s.messages), s.mode, static_cast<uint64_t>(f_.common.n_ctx),
            s.text, std::move(s.tokens));
        if (static_cast<int64_t>(t.tokens().size()) >= f_.common.n_ctx) {
            throw std::runtime_error("session " + s.info.id + " holds " +
                                     std::to_string(t.tokens().size()) +
                                     " tokens: it does not fit a context of " +
                                     std::to_string(f_.common.n_ctx) + " (raise -c)");
        }
        agent_->set_conversation(std::move(t));
        const int64_t loaded = lib_->load_state(agent_->conversation(), agent_->session());
        id_ = s.info.id;
        title_ = s.info.title;
        dirty_ = false;
        std::printf(
            "switched to %s: %s (%lld messages, %lld tokens; %lld loaded from the disk "
            "cache)\n",
            id_.c_str(), title_.c_str(), static_cast<long long>(s.info.messages),
            static_cast<long long>(s.info.tokens), static_cast<long long>(loaded));
    }

    void history(int n) {
        const std::vector<chat::message>& m = agent_->conversation().messages();
        const size_t start = n > 0 && static_cast<size_t>(n) < m.size() ? m.size() - n : 1;
        for (size_t i = std::max<size_t>(start, 1); i < m.size(); ++i) {
            const chat::message& x = m[i];
            std::string body = x.content;
            if (x.role == chat::role::assistant && !x.tool_calls.empty()) {
                for (const chat::tool_call& c : x.tool_calls) {
                    body += (body.empty() ? "" : "\n") + std::string("-> ") + c.name + " " +
                            c.arguments;
                }
            }
            std::printf("%s[%s]%s %s\n", tty_ ? "\x1b[1m" : "", chat::role_name(x.role),
                        tty_ ? "\x1b[0m" : "", body.c_str());
        }
    }

    const Engine& engine_;
    agent_flags& f_;
    bool tty_ = false;
    bool interactive_ = false;
    agent::agent_tools tools_;
    std::unique_ptr<agent::agent> agent_;
    std::unique_ptr<agent::library> lib_;
    std::ofstream trace_;
    std::unique_ptr<Progress> bar_;
    int64_t bar_start_ = 0;
    int64_t base_pos_ = 0;
    markdown_stream md_{false};
    busy_terminal busy_;
    std::string edit_;      // the text the next prompt line starts with
    bool stopped_ = false;  // the last turn was stopped with Ctrl+C
    bool in_reasoning_ = false;
    bool at_line_start_ = true;
    bool dirty_ = false;
    std::string id_;
    std::string title_;
};

int run_agent(agent_flags& f) {
    const auto engine = load_engine(f.common);
    install_interrupt_handler();
    terminal_agent a(*engine, f);
    if (!f.prompt.empty()) return a.one_shot(f.prompt);
    return a.repl();
}

action setup(CLI::App& sub) {
    auto f = std::make_shared<agent_flags>();
    f->common.system.clear();  // the agent's own preamble comes first; -sys adds to it
    add_common_flags(sub, f->common);
    sub.add_option("-p,--prompt", f->prompt, "Run one turn with this message, then exit");
    sub.add_option("--trace", f->trace,
                   "Append a JSON line per event (prefill, reply, tool call, compaction) to FILE");
    sub.add_option("--sessions", f->sessions,
                   "Folder of saved sessions and their KV files (default: $MAGNETAR_AGENT_DIR, "
                   "else $XDG_DATA_HOME/magnetar/agent, else ~/.local/share/magnetar/agent)");
    sub.add_option("--dir", f->workdir, "Working directory of the tools (default: the current one)")
        ->check(CLI::ExistingDirectory);
    sub.add_option("--allow", f->allow, "Another folder the file tools may use (repeatable)")
        ->check(CLI::ExistingDirectory);
    sub.add_option("--max-steps", f->max_steps, "Most replies (tool rounds) in one turn")
        ->check(CLI::Range(1, 10000));
    sub.add_option("--kv-disk-space-mb", f->kv_space_mb,
                   "Disk budget of the saved states in the sessions folder (MiB)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
    sub.footer(
        "A coding agent on the engine: the model calls the built-in tools (bash, bash_status, "
        "bash_stop, read, more, write, edit, search, list) in the working directory. Commands: "
        "/help, /save [TITLE], /list, /switch PREFIX, /history [N], /new, /compact, /quit. See "
        "docs/agent.md.");
    return [f]() { return run_agent(*f); };
}

}  // namespace

MAGNETAR_COMMAND(agent, "agent", "A coding agent in the terminal, on the engine", setup);

}  // namespace magnetar::cli
