// libFuzzer target: the session payload reader and the disk KV cache file reader on arbitrary
// bytes, against the tiny model (models/magnetar-tiny.gguf found upwards from the current
// directory; $MAGNETAR_FUZZ_MODEL overrides).
//
// The first input byte picks the reader, the rest is the payload or the file:
//   even: Session::load_payload. It must refuse with bad_payload and leave the session empty,
//         or load; a loaded timeline saves to a payload that loads again to the same tokens
//         and logits and saves to the same bytes.
//   odd:  the file is written under its own key's name in a private directory, then
//         inspect_file, read_key_text, verify_file, read_tool_map and load_file run on it; each
//         returns a status (never crashes); load_file only succeeds on a file verify_file
//         accepts, and then read_tool_map gives the map it loaded.
// Seeds: tests/fuzz/seeds-kv/ (a payload and a file of a few tokens), regenerated with
//   MAGNETAR_FUZZ_WRITE_SEEDS=DIR build-fuzz/bin/fuzz_kv -runs=0
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/paths.h"
#include "kvstore/kv_file.h"
#include "kvstore/kv_store.h"
#include "magnetar/engine.h"

namespace {

using namespace magnetar;
namespace fs = std::filesystem;

std::unique_ptr<Engine> g_engine;
std::unique_ptr<Session> g_session, g_other;
kvstore::model_identity g_id;
std::string g_dir;

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "kv_fuzz: %s\n", what);
    std::abort();
}

std::unique_ptr<Session> new_session() {
    session_options so;
    so.n_ctx = 256;
    so.checkpoint_interval = 0;
    std::unique_ptr<Session> s;
    if (!g_engine->create_session(so, &s).ok()) fail("cannot create a session");
    return s;
}

void write_bytes(const std::string& path, const void* data, size_t n) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

// Seeds: a payload and a cache file of a short timeline.
void write_seeds(const std::string& dir) {
    fs::create_directories(dir);
    std::unique_ptr<Session> s = new_session();
    std::vector<int32_t> ids;
    if (!g_engine->tokenize("Magnetars are neutron stars.", false, &ids).ok()) fail("tokenize");
    if (!s->eval(ids).ok()) fail("eval");
    std::vector<uint8_t> payload(1, 0);
    std::vector<uint8_t> bytes;
    if (!s->save_payload(&bytes).ok()) fail("save_payload");
    payload.insert(payload.end(), bytes.begin(), bytes.end());
    write_bytes(dir + "/payload.bin", payload.data(), payload.size());
    kvstore::write_request req;
    const std::string key = "Magnetars are neutron stars.";
    req.key_text = key;
    req.reason = kvstore::save_reason::cold;
    std::string path;
    if (!kvstore::write_file(g_dir, *s, g_id, req, &path).ok()) fail("write_file");
    std::ifstream f(path, std::ios::binary);
    std::vector<uint8_t> file(1, 1);
    file.insert(file.end(), std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    write_bytes(dir + "/file.bin", file.data(), file.size());
    fs::remove(path);
}

void check_payload(const uint8_t* data, size_t size) {
    const status st = g_session->load_payload(std::span<const uint8_t>(data, size));
    if (!st.ok()) {
        if (g_session->n_past() != 0) fail("a refused payload left a timeline behind");
        return;
    }
    std::vector<uint8_t> a, b;
    if (!g_session->save_payload(&a).ok()) fail("a loaded payload does not save");
    if (!g_other->load_payload(a).ok()) fail("a saved payload does not load");
    if (g_other->n_past() != g_session->n_past()) fail("token count changed");
    const auto ta = g_session->tokens(), tb = g_other->tokens();
    if (!std::equal(ta.begin(), ta.end(), tb.begin(), tb.end())) fail("tokens changed");
    const auto la = g_session->logits(), lb = g_other->logits();
    if (la.size() != lb.size() || std::memcmp(la.data(), lb.data(), la.size_bytes()) != 0)
        fail("logits changed");
    if (!g_other->save_payload(&b).ok() || a != b) fail("save is not stable");
}

void check_file(const uint8_t* data, size_t size) {
    const std::string tmp = g_dir + "/input";
    write_bytes(tmp, data, size);
    std::string key;
    std::string path = tmp;
    if (kvstore::read_key_text(tmp, &key).ok()) {
        path = g_dir + "/" + kvstore::file_name_for(key);
        fs::rename(tmp, path);
    }
    kvstore::file_info info;
    (void)kvstore::inspect_file(path, &info);
    const bool verified = kvstore::verify_file(path, &info).ok();
    // The map alone (a restarting server's preload) never crashes; on a verified file it is
    // the map a full load gives.
    kvstore::tool_map alone, full;
    const bool map_read = kvstore::read_tool_map(path, &alone).ok();
    const bool loaded = kvstore::load_file(path, *g_session, g_id, nullptr, &full).ok();
    if (loaded && (!map_read || alone != full)) fail("read_tool_map differs from load_file");
    if (loaded && !verified) fail("load_file took a file verify_file refuses");
    if (!loaded && g_session->n_past() != 0) fail("a refused file left a timeline behind");
    fs::remove(path);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* env = std::getenv("MAGNETAR_FUZZ_MODEL");
    const std::string model = env ? env : find_in_ancestors("models/magnetar-tiny.gguf");
    if (model.empty()) {
        std::fprintf(stderr,
                     "kv_fuzz: models/magnetar-tiny.gguf not found (scripts/setup.sh "
                     "makes it) and MAGNETAR_FUZZ_MODEL not set\n");
        std::abort();
    }
    engine_options eo;
    eo.model_path = model;
    eo.n_threads = 1;
    if (!Engine::load(eo, &g_engine).ok()) fail("cannot load the model");
    g_id = kvstore::identity_of_model(model);
    g_session = new_session();
    g_other = new_session();
    g_dir =
        (fs::temp_directory_path() / ("magnetar-kv-fuzz-" + std::to_string(::getpid()))).string();
    fs::create_directories(g_dir);
    if (const char* seeds = std::getenv("MAGNETAR_FUZZ_WRITE_SEEDS")) write_seeds(seeds);
    std::atexit([] { fs::remove_all(g_dir); });
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    g_session->reset();  // each input starts from an empty timeline
    if (data[0] % 2 == 0) {
        check_payload(data + 1, size - 1);
    } else {
        check_file(data + 1, size - 1);
    }
    return 0;
}
