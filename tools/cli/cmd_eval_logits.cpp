// `magnetar eval-logits`: logits (and named intermediates) of a token sequence, in the shape
// shared with the PyTorch reference (docs/reference.md), for the comparison tests.
#include <fnmatch.h>

#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/common.h"
#include "cli/engine_flags.h"
#include "cli/token_file.h"
#include "magnetar/engine.h"

namespace magnetar::cli {

namespace {

struct file_closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
};
using file_ptr = std::unique_ptr<std::FILE, file_closer>;

file_ptr open_out(const std::string& path) {
    file_ptr f(std::fopen(path.c_str(), "wb"));
    if (!f) throw std::runtime_error("cannot write " + path);
    return f;
}

void write_floats(std::FILE* f, const float* data, size_t n, const std::string& what) {
    if (n && std::fwrite(data, sizeof(float), n, f) != n)
        throw std::runtime_error("write failed: " + what);
}

void check(const status& st) {
    if (!st.ok()) throw std::runtime_error(st.message());
}

std::vector<std::string> split_names(const std::string& s) {
    std::vector<std::string> out;
    size_t b = 0;
    while (b <= s.size()) {
        const size_t e = s.find(',', b);
        const std::string part = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
        if (!part.empty()) out.push_back(part);
        if (e == std::string::npos) break;
        b = e + 1;
    }
    return out;
}

struct args {
    std::string model;
    std::string mtp_model;
    std::string tokens;
    std::string out;
    std::string mode = "prefill";
    bool all_positions = false;
    std::string dump;
    std::string dump_dir;
    std::string mtp_out;
    int threads = 0;
    int64_t ctx = 0;
    std::string load_payload;
    std::string save_payload;
    engine_flags engine;
};

std::vector<uint8_t> read_bytes(const std::string& path) {
    file_ptr f(std::fopen(path.c_str(), "rb"));
    if (!f) throw std::runtime_error("cannot read " + path);
    std::vector<uint8_t> out;
    uint8_t buf[1 << 16];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) out.insert(out.end(), buf, buf + n);
    if (std::ferror(f.get())) throw std::runtime_error("read failed: " + path);
    return out;
}

int run(const args& a) {
    const std::vector<int32_t> ids = read_token_file(a.tokens);
    const int64_t n = static_cast<int64_t>(ids.size());

    session_options so;
    so.n_ctx = a.ctx > 0 ? a.ctx : n;
    bool decode = false;
    if (a.mode == "prefill") {
        so.chunk_size = 2048;
    } else if (a.mode == "decode") {
        decode = true;
    } else if (a.mode.rfind("chunked:", 0) == 0) {
        const long v = std::strtol(a.mode.c_str() + 8, nullptr, 10);
        if (v < 1) throw std::runtime_error("--mode chunked:N needs N >= 1");
        so.chunk_size = v;
    } else {
        throw std::runtime_error("--mode must be prefill, decode or chunked:N");
    }
    so.all_logits = a.all_positions && !decode;
    so.mtp_logits = !a.mtp_out.empty();
    const std::vector<std::string> dumps = split_names(a.dump);
    if (!dumps.empty() && a.dump_dir.empty()) throw std::runtime_error("--dump needs --dump-dir");

    engine_options eo;
    eo.model_path = resolve_model_path(a.model);
    eo.mtp_path = a.mtp_model;
    eo.n_threads = a.threads;
    eo.exact_matmul = true;  // the reference comparison path: float activations everywhere
    apply_engine_flags(a.engine, eo);
    std::unique_ptr<Engine> engine;
    check(Engine::load(eo, &engine));
    report_engine(engine->info());
    std::unique_ptr<Session> session;
    check(engine->create_session(so, &session));
    const size_t n_vocab = engine->info().n_vocab;

    std::map<std::string, file_ptr> dump_files;
    if (!dumps.empty()) {
        session->set_dump(dumps, [&](const std::string& name, int64_t, int64_t n_rows,
                                     int64_t width, const float* data) {
            file_ptr& f = dump_files[name];
            if (!f) f = open_out(a.dump_dir + "/" + name + ".f32");
            write_floats(f.get(), data, static_cast<size_t>(n_rows * width), name);
        });
    }

    if (!a.load_payload.empty()) check(session->load_payload(read_bytes(a.load_payload)));

    file_ptr out = open_out(a.out);
    file_ptr mtp = a.mtp_out.empty() ? nullptr : open_out(a.mtp_out);
    auto write_mtp = [&] {
        for (int64_t j = 0; mtp && j < session->n_mtp_rows(); ++j) {
            write_floats(mtp.get(), session->mtp_logits_at(j).data(), n_vocab, a.mtp_out);
        }
    };
    if (decode) {
        for (int64_t i = 0; i < n; ++i) {
            check(session->eval(std::span<const int32_t>(ids.data() + i, 1)));
            if (a.all_positions || i == n - 1)
                write_floats(out.get(), session->logits().data(), n_vocab, a.out);
            write_mtp();
        }
    } else {
        check(session->eval(ids));
        for (int64_t i = 0; i < session->n_logit_rows(); ++i) {
            write_floats(out.get(), session->logits_at(i).data(), n_vocab, a.out);
        }
        write_mtp();
    }

    if (!a.save_payload.empty()) {
        std::vector<uint8_t> bytes;
        check(session->save_payload(&bytes));
        file_ptr f = open_out(a.save_payload);
        if (std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size())
            throw std::runtime_error("write failed: " + a.save_payload);
    }

    // Final cache state dumps (comp_rows, index_rows) of every layer that has them.
    for (uint32_t il = 0; il < engine->info().n_layer && !dumps.empty(); ++il) {
        for (const char* what : {"comp_rows", "index_rows"}) {
            const std::string name = "blk." + std::to_string(il) + "." + what;
            bool wanted = false;
            for (const auto& p : dumps) wanted = wanted || fnmatch(p.c_str(), name.c_str(), 0) == 0;
            std::vector<float> data;
            int64_t width = 0;
            if (!wanted || !session->read_state(name, &data, &width).ok()) continue;
            file_ptr f = open_out(a.dump_dir + "/" + name + ".f32");
            write_floats(f.get(), data.data(), data.size(), name);
        }
    }
    return 0;
}

action setup(CLI::App& sub) {
    auto a = std::make_shared<args>();
    sub.add_option("-m,--model", a->model,
                   "Model GGUF (default: $MAGNETAR_MODEL or models/magnetar-tiny.gguf)");
    sub.add_option("--mtp-model", a->mtp_model, "Separate MTP GGUF (published layout)");
    sub.add_option("--tokens", a->tokens, "JSON array of token ids; positions start at 0")
        ->required();
    sub.add_option("--out", a->out, "Output logits, raw float32 [rows, n_vocab]")->required();
    sub.add_option("--mode", a->mode,
                   "prefill (one batch, chunks of 2048), decode (one token at a time) or chunked:N")
        ->capture_default_str();
    sub.add_flag("--all-positions", a->all_positions,
                 "Write the logits of every position (default: the last)");
    sub.add_option("--dump", a->dump,
                   "Named intermediates to write, comma-separated ('*' wildcards allowed)");
    sub.add_option("--dump-dir", a->dump_dir,
                   "Folder of the dumps (DIR/NAME.f32, one row per position)");
    sub.add_option("--mtp-out", a->mtp_out,
                   "MTP draft logits [n_positions - 1, n_vocab] (models with MTP)");
    sub.add_option("-t,--threads", a->threads, "Threads (default: physical cores)");
    sub.add_option("--ctx", a->ctx, "Session context (default: the number of tokens)");
    sub.add_option("--load-payload", a->load_payload,
                   "Session payload (protocol section 6.4.3) to load before the tokens");
    sub.add_option("--save-payload", a->save_payload,
                   "Write the session payload after the tokens to this file");
    add_engine_flags(sub, a->engine);
    add_steering_flags(sub, a->engine);
    sub.footer("All modes give the same logits. Dump names and file shapes: docs/reference.md.");
    return [a]() { return run(*a); };
}

}  // namespace

MAGNETAR_COMMAND(eval_logits, "eval-logits",
                 "Evaluate token ids and write logits (reference comparison)", setup);

}  // namespace magnetar::cli
