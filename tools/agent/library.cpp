// Saved agent sessions: see library.h.
#include "agent/library.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "agent/file_tools.h"
#include "core/error.h"
#include "kvstore/kv_file.h"
#include "kvstore/kv_store.h"

namespace magnetar::agent {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr int kRecordVersion = 1;
constexpr uint64_t kMaxRecordBytes = uint64_t{256} << 20;

const char* mode_name(chat::think_mode m) {
    switch (m) {
        case chat::think_mode::nothink:
            return "nothink";
        case chat::think_mode::think:
            return "think";
        case chat::think_mode::think_max:
            return "think_max";
    }
    return "think";
}

chat::think_mode mode_from(const std::string& s) {
    if (s == "nothink") return chat::think_mode::nothink;
    if (s == "think") return chat::think_mode::think;
    if (s == "think_max") return chat::think_mode::think_max;
    throw Error("agent session: unknown thinking mode \"" + s + "\"");
}

void make_private_dir(const std::string& d) {
    std::error_code ec;
    fs::create_directories(d, ec);
    if (ec) throw Error(d + ": cannot create: " + ec.message());
    ::chmod(d.c_str(), 0700);
}

bool is_record_name(const std::string& name) {
    if (name.size() != 16 + 5 || name.substr(16) != ".json") return false;
    return std::all_of(name.begin(), name.begin() + 16,
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::string new_id() {
    std::random_device rd;
    const uint64_t x = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
    return buf;
}

}  // namespace

library::library(std::string dir, const Engine& engine, uint64_t budget_bytes,
                 std::function<void(const std::string&)> log)
    : dir_(std::move(dir)), engine_(engine), log_(std::move(log)) {
    make_private_dir(dir_);
    make_private_dir(dir_ + "/sessions");
    kvstore::store_options so;
    so.dir = dir_ + "/kv";
    so.budget_bytes = budget_bytes;
    so.min_tokens = 1;
    store_ =
        std::make_unique<kvstore::store>(so, kvstore::identity_of_model(engine.info().path), log_);
}

library::~library() = default;

int64_t library::load_state(const transcript& t, Session& s) {
    const std::vector<int32_t>& want = t.tokens();
    kvstore::store::hit h;
    const bool found = store_->load_longest_prefix(
        t.text(), s, &h, [&want](std::string_view, std::span<const int32_t> tokens) {
            return tokens.size() <= want.size() &&
                   std::equal(tokens.begin(), tokens.end(), want.begin());
        });
    return found ? static_cast<int64_t>(h.tokens) : 0;
}

void library::save_base(const transcript& t, const Session& s) {
    const std::string name = kvstore::file_name_for(t.base_text());
    for (const kvstore::file_info& e : store_->entries()) {
        if (e.name + ".kv" == name) return;
    }
    store_->save(s, t.base_text(), kvstore::save_reason::agent_system);
}

std::string library::save(const std::string& id_in, const std::string& title, const transcript& t,
                          const Session& s) {
    const std::string id = id_in.empty() ? new_id() : id_in;
    const std::string record = dir_ + "/sessions/" + id + ".json";
    std::string old_kv;
    uint64_t created = kvstore::unix_now();
    if (!id_in.empty() && fs::exists(record)) {
        try {
            const saved_session old = read_record(record);
            old_kv = old.kv_path;
            created = old.info.created;
        } catch (const std::exception&) {
        }
    }
    const std::string kv = store_->options().dir + "/" + kvstore::file_name_for(t.text());
    const bool stored = store_->save(s, t.text(), kvstore::save_reason::agent_session);
    if (!old_kv.empty() && old_kv != kv) store_->remove(old_kv, "replaced by a newer save");

    json j;
    j["version"] = kRecordVersion;
    j["id"] = id;
    j["title"] = title;
    j["created"] = created;
    j["updated"] = kvstore::unix_now();
    j["model"] = engine_.info().name;
    j["mode"] = mode_name(t.mode());
    j["messages"] = transcript::messages_to_json(t.messages());
    j["text"] = t.text();
    j["tokens"] = t.tokens();
    j["kv_file"] = stored ? kv : "";
    std::string why;
    if (!write_atomically(record, j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n",
                          0600, &why)) {
        throw Error(why);
    }
    return id;
}

saved_session library::read_record(const std::string& path) const {
    std::error_code ec;
    const auto st = fs::symlink_status(path, ec);
    if (ec || !fs::is_regular_file(st)) throw Error(path + ": not a regular file");
    if (fs::file_size(path, ec) > kMaxRecordBytes) throw Error(path + ": too large");
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(path + ": cannot open");
    std::stringstream ss;
    ss << in.rdbuf();
    json j;
    try {
        j = json::parse(ss.str());
    } catch (const std::exception& e) {
        throw Error(path + ": not JSON: " + e.what());
    }
    try {
        if (j.at("version").get<int>() != kRecordVersion) throw Error("unknown version");
        saved_session out;
        out.info.id = j.at("id").get<std::string>();
        out.info.title = j.at("title").get<std::string>();
        out.info.created = j.at("created").get<uint64_t>();
        out.info.updated = j.at("updated").get<uint64_t>();
        out.mode = mode_from(j.at("mode").get<std::string>());
        out.messages = transcript::messages_from_json(j.at("messages"));
        out.text = j.at("text").get<std::string>();
        out.tokens = j.at("tokens").get<std::vector<int32_t>>();
        out.kv_path = j.at("kv_file").get<std::string>();
        out.info.tokens = static_cast<int64_t>(out.tokens.size());
        out.info.messages = static_cast<int64_t>(out.messages.size());
        out.info.has_state = !out.kv_path.empty() && fs::is_regular_file(out.kv_path, ec);
        return out;
    } catch (const Error& e) {
        throw Error(path + ": " + e.what());
    } catch (const std::exception& e) {
        throw Error(path + ": bad record: " + e.what());
    }
}

std::vector<saved_info> library::list() const {
    std::vector<saved_info> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_ + "/sessions", ec)) {
        const std::string name = e.path().filename().string();
        if (!is_record_name(name)) continue;
        try {
            out.push_back(read_record(e.path().string()).info);
        } catch (const std::exception& ex) {
            if (log_) log_(std::string("skipped ") + ex.what());
        }
    }
    std::sort(out.begin(), out.end(), [](const saved_info& a, const saved_info& b) {
        return a.updated != b.updated ? a.updated > b.updated : a.id < b.id;
    });
    return out;
}

saved_session library::find(const std::string& prefix) const {
    if (prefix.empty()) throw Error("give the start of a session id (/list shows them)");
    std::vector<std::string> hits;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_ + "/sessions", ec)) {
        const std::string name = e.path().filename().string();
        if (is_record_name(name) && name.compare(0, prefix.size(), prefix) == 0) {
            hits.push_back(e.path().string());
        }
    }
    if (hits.empty()) throw Error("no saved session starts with " + prefix);
    if (hits.size() > 1) {
        throw Error(std::to_string(hits.size()) + " saved sessions start with " + prefix +
                    "; give more of the id");
    }
    return read_record(hits.front());
}

}  // namespace magnetar::agent
