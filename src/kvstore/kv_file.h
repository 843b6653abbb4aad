// One disk KV cache file (protocol §6.4): a 48-byte header, the key text (the rendered prefix the
// state belongs to), the session payload, the optional tool-id map section and, added by
// Magnetar, an integrity section.
//
//   0   48          header (kv_header)
//   48  4           u32 text_len
//   52  text_len    key text
//   ..  payload     session payload (kv/payload.h)
//   ..              tool-id map "KTM" v1 (ext bit 0): u32 count, count x {u32 id_len,
//                   u32 dsml_len, id, dsml}
//   ..  44          integrity "KIS" v1 (ext bit 3): u8[3] magic, u8 version, u8[32] SHA-256 of
//                   bytes [48, start of this section), u64 model fingerprint
//
// The name is the lowercase hex SHA-1 of the key text plus ".kv". Header fields other than hits
// and last-used never change after the write; a hit rewrites those two in place, which is why
// the checksum starts after the header (the header is checked field by field instead).
//
// Owns: the byte layout, crash-safe writing (temp file, fsync, rename, directory fsync) and
// every check on reading. Does not own: which prefix to save when (the server), the directory
// index and the budget (kv_store.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "magnetar/session.h"
#include "magnetar/status.h"

namespace magnetar::kvstore {

enum class save_reason : uint8_t {
    unknown = 0,
    cold = 1,
    continued = 2,
    evict = 3,
    shutdown = 4,
    agent_system = 5,
    agent_session = 6,
};
const char* reason_name(save_reason r);

inline constexpr uint8_t k_ext_tool_map = 1u << 0;
inline constexpr uint8_t k_ext_responses_key = 1u << 1;
inline constexpr uint8_t k_ext_thinking_key = 1u << 2;
inline constexpr uint8_t k_ext_integrity = 1u << 3;
inline constexpr size_t k_header_bytes = 48;
inline constexpr size_t k_integrity_bytes = 44;

struct kv_header {
    uint8_t version = 1;
    uint8_t quant_bits = 2;  // routed-expert quantization: 2 or 4
    save_reason reason = save_reason::unknown;
    uint8_t ext = 0;
    uint32_t tokens = 0;
    uint32_t hits = 0;
    uint32_t ctx = 0;
    uint64_t created = 0;    // unix seconds
    uint64_t last_used = 0;  // unix seconds
    uint64_t payload_bytes = 0;
};

void encode_header(const kv_header& h, uint8_t out[k_header_bytes]);
// Throws magnetar::Error naming the bad field.
kv_header decode_header(const uint8_t in[k_header_bytes]);

using tool_map = std::vector<std::pair<std::string, std::string>>;  // tool id -> sampled DSML

// Identity of the loaded model a file must match (kv_store computes it from the GGUF).
struct model_identity {
    uint64_t fingerprint = 0;
    uint8_t quant_bits = 2;
};

std::string sha1_hex(std::string_view text);
std::string file_name_for(std::string_view key_text);  // sha1_hex + ".kv"
// Names this module writes: an entry "<40 lowercase hex>.kv" and a temp file
// "<40 hex>.kv.tmp.<pid>" or "<40 hex>.kv.tmp.<pid>.<k>" (k < 16, when the first name was
// taken); is_temp_name gives the writer's pid.
bool is_entry_name(std::string_view name);
bool is_temp_name(std::string_view name, long* pid = nullptr);
// "FIFO", "directory", "symbolic link", ... for a st_mode, in messages.
const char* file_kind(unsigned mode);

struct write_request {
    std::string_view key_text;
    save_reason reason = save_reason::unknown;
    uint8_t key_flags = 0;  // k_ext_responses_key / k_ext_thinking_key
    const tool_map* tools = nullptr;
    uint64_t now = 0;  // creation time (0: the current time)
};

// Writes `session`'s timeline into dir/<sha1>.kv through a new temp file (O_EXCL, mode 0600,
// never an existing name or a symbolic link); returns the final path. Any write error (a full
// disk, EFBIG under a file-size limit) is returned and the temp file removed.
status write_file(const std::string& dir, const Session& session, const model_identity& id,
                  const write_request& req, std::string* path = nullptr);

// What a scan of a file learns without reading the payload.
struct file_info {
    std::string path;
    std::string name;  // sha1 hex, without ".kv"
    kv_header header;
    uint32_t text_len = 0;
    uint64_t file_size = 0;
    uint64_t fingerprint = 0;
};

// Every reader below opens only regular files, never blocking on a FIFO or device and never
// following a symbolic link: anything else is status_code::invalid_argument ("not a regular
// file", "cannot open"), while a cache file with bad contents is status_code::bad_payload.
//
// Header, sizes and layout checks (no checksum, no payload): fast enough for a directory scan.
status inspect_file(const std::string& path, file_info* out);
// Full verification: inspect_file, the key text's SHA-1 against the name, the tool map's
// structure and the integrity checksum. Reads the whole file.
status verify_file(const std::string& path, file_info* info = nullptr);
// Reads the key text.
status read_key_text(const std::string& path, std::string* text);
// Reads only the tool-id map section (empty when the file has none), with inspect_file's checks
// and every length bounded, but without the checksum (that would read the payload).
status read_tool_map(const std::string& path, tool_map* out);
// Loads the payload into `session` after verify-level checks (checksum included) and the model
// identity; fills the tool map when the file has one.
status load_file(const std::string& path, Session& session, const model_identity& id,
                 std::string* key_text = nullptr, tool_map* tools = nullptr);
// Rewrites hits + 1 and last_used in place.
status touch_file(const std::string& path, uint64_t now = 0);

uint64_t unix_now();

}  // namespace magnetar::kvstore
