// The disk KV cache directory (protocol §6.5–§6.8): an index of the valid files rebuilt from the
// directory at start, lookup of the longest stored prefix of a rendered prompt, saving with the
// budget check, and eviction by score under the byte budget.
//
// Every file that fails a check (header, size, name, checksum, payload) is logged and removed,
// never loaded. Files of another model (fingerprint) and anything under our names that is not a
// regular file are left in place and not indexed: several models (servers) may share one
// directory, each managing and budgeting only its own entries. One store per process: the
// index is kept in memory and updated by this object's own saves, loads and removals.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvstore/kv_file.h"
#include "magnetar/engine.h"

namespace magnetar::kvstore {

struct store_options {
    std::string dir;
    uint64_t budget_bytes = 4096ull << 20;  // --kv-disk-space-mb (default 4096 MiB)
    uint32_t min_tokens = 512;              // --kv-cache-min-tokens
    bool reject_different_quant = false;    // --kv-cache-reject-different-quant
};

using log_fn = std::function<void(const std::string& line)>;

// The identity files are checked against: a fingerprint of the model's architecture (tensor
// names and shapes, general.name) and of the first bytes of its embedding and output weights
// (equal for requantized variants of one model), and the routed experts' bits (4 iff the
// gate experts are Q4_K).
model_identity identity_of_model(const std::string& gguf_path);

// Score of protocol §6.7: (effective hits + 1) * tokens / file size, hits decaying with a
// six-hour half-life since last use.
double eviction_score(const file_info& e, uint64_t now);

class store {
  public:
    // Creates the directory (mode 0700) if needed, checks that it is the user's own and not
    // world-writable, removes stale temp files (regular files of ours whose writer is gone),
    // indexes this model's valid files (removing invalid ones; other models' left alone) and
    // enforces the budget. Throws magnetar::Error when the directory cannot be created or read
    // or fails the checks.
    store(store_options opts, model_identity id, log_fn log = {});

    struct hit {
        std::string path;
        std::string key_text;  // the stored prefix of the prompt
        uint32_t tokens = 0;
        tool_map tools;
    };
    // Decides whether a loaded candidate's tokens may stand for its key text in the prompt
    // being served. Equal bytes are not enough: a control token and its plain-text spelling
    // decode to the same bytes, so the caller checks where the control tokens are.
    using accept_fn =
        std::function<bool(std::string_view key_text, std::span<const int32_t> tokens)>;
    // Longest stored key text that is a byte prefix of `text` (ties: more tokens) whose tokens
    // `accept` takes, loaded into `session`. Candidates that fail to load are removed and the
    // next one is tried (one that now belongs to another model, or is no longer a regular
    // file, is only forgotten); refused ones stay stored (they fit other prompts). False when
    // nothing usable is stored; `session` is then unchanged unless a candidate was loaded and
    // refused or failed (it is then empty).
    bool load_longest_prefix(std::string_view text, Session& session, hit* out,
                             const accept_fn& accept = {});

    // Saves the session's timeline under key_text. Skipped (returns false, logs why) below
    // min_tokens, when the file would not fit the budget or when the name is held by another
    // model's entry; a failed write (full disk, file-size limit) returns false with one log
    // line and leaves no temp file. True when written.
    bool save(const Session& session, std::string_view key_text, save_reason reason,
              uint8_t key_flags = 0, const tool_map* tools = nullptr);

    // Removes one entry by path; false when it is not indexed.
    bool remove(const std::string& path, const std::string& why);

    std::vector<file_info> entries() const;
    // Hands the tool-id map of each indexed file that has one to `per_file`, one file at a
    // time (oldest use first, so that the most recently used files' entries come last), for
    // exact DSML replay across restarts. A file whose map cannot be read is logged and skipped
    // (the file itself stays).
    void stored_tools(const std::function<void(tool_map& map)>& per_file) const;
    uint64_t total_bytes() const;
    const store_options& options() const { return opts_; }
    // Deletes the lowest-scoring entries until the total fits the budget; `protect` (a path)
    // goes last.
    void enforce_budget(const std::string& protect = {});

  private:
    void log(const std::string& line) const;
    void check_directory();
    void scan();

    store_options opts_;
    model_identity id_;
    log_fn log_;
    std::map<std::string, file_info> index_;  // by path
};

}  // namespace magnetar::kvstore
