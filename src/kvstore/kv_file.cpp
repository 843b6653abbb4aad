// The disk KV cache file: encoding, crash-safe writing and every check on reading (kv_file.h).
#include "kvstore/kv_file.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <memory>

#include "core/error.h"
#include "core/format.h"

namespace magnetar::kvstore {

namespace {

constexpr size_t k_io_chunk = 8u << 20;
constexpr uint32_t k_max_text = 1u << 30;
constexpr uint32_t k_max_tool_entries = 1u << 22;
constexpr uint32_t k_max_tool_id = 256;
constexpr uint32_t k_max_tool_dsml = 512u << 20;
// The whole section: the replay memory's byte limit (512 MiB) plus the entries' bookkeeping.
constexpr uint64_t k_max_tool_map_bytes =
    (uint64_t{512} << 20) + 8 * uint64_t{k_max_tool_entries} + 8;
constexpr int k_temp_names = 16;  // <name>.kv.tmp.<pid>, then .<pid>.1 ... .<pid>.15

void put_u32(uint8_t* p, uint32_t v) {
    std::memcpy(p, &v, 4);
}
void put_u64(uint8_t* p, uint64_t v) {
    std::memcpy(p, &v, 8);
}
uint32_t get_u32(const uint8_t* p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
uint64_t get_u64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

std::string errno_text() {
    return std::strerror(errno);
}

// File descriptor that closes itself.
struct fd_guard {
    int fd = -1;
    explicit fd_guard(int f) : fd(f) {}
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
    fd_guard(const fd_guard&) = delete;
    fd_guard& operator=(const fd_guard&) = delete;
};

bool write_all(int fd, const void* data, size_t n) {
    const uint8_t* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        p += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

bool read_all(int fd, void* data, size_t n) {
    uint8_t* p = static_cast<uint8_t*>(data);
    while (n > 0) {
        const ssize_t r = ::read(fd, p, n);
        if (r < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        if (r == 0) return false;
        p += r;
        n -= static_cast<size_t>(r);
    }
    return true;
}

// Incremental SHA-256 (EVP interface).
class sha256 {
  public:
    sha256() : ctx_(EVP_MD_CTX_new()) {
        if (!ctx_ || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1)
            throw Error("kv store: SHA-256 unavailable");
    }
    ~sha256() { EVP_MD_CTX_free(ctx_); }
    sha256(const sha256&) = delete;
    sha256& operator=(const sha256&) = delete;
    void update(const void* p, size_t n) { EVP_DigestUpdate(ctx_, p, n); }
    void final(uint8_t out[32]) {
        unsigned int len = 0;
        EVP_DigestFinal_ex(ctx_, out, &len);
    }

  private:
    EVP_MD_CTX* ctx_;
};

// Buffered writer that hashes everything after the header.
class hashed_writer {
  public:
    explicit hashed_writer(int fd) : fd_(fd) { buf_.reserve(k_io_chunk); }
    bool put(const void* data, size_t n) {
        sha_.update(data, n);
        const uint8_t* p = static_cast<const uint8_t*>(data);
        while (n > 0) {
            const size_t k = std::min(n, k_io_chunk - buf_.size());
            buf_.insert(buf_.end(), p, p + k);
            p += k;
            n -= k;
            if (buf_.size() == k_io_chunk && !flush()) return false;
        }
        return true;
    }
    bool put_u32(uint32_t v) { return put(&v, 4); }
    bool flush() {
        if (!write_all(fd_, buf_.data(), buf_.size())) return false;
        buf_.clear();
        return true;
    }
    void digest(uint8_t out[32]) { sha_.final(out); }

  private:
    int fd_;
    sha256 sha_;
    std::vector<uint8_t> buf_;
};

// Buffered reader over [48, limit) that hashes what it hands out.
class hashed_reader {
  public:
    hashed_reader(int fd, uint64_t limit) : fd_(fd), left_(limit) {}
    bool get(void* data, size_t n) {
        uint8_t* p = static_cast<uint8_t*>(data);
        while (n > 0) {
            if (pos_ == buf_.size()) {
                const size_t want = static_cast<size_t>(std::min<uint64_t>(k_io_chunk, left_));
                if (want == 0) return false;
                buf_.resize(want);
                if (!read_all(fd_, buf_.data(), want)) return false;
                left_ -= want;
                pos_ = 0;
            }
            const size_t k = std::min(n, buf_.size() - pos_);
            std::memcpy(p, buf_.data() + pos_, k);
            sha_.update(buf_.data() + pos_, k);
            pos_ += k;
            p += k;
            n -= k;
        }
        return true;
    }
    bool get_u32(uint32_t* v) { return get(v, 4); }
    void digest(uint8_t out[32]) { sha_.final(out); }

  private:
    int fd_;
    uint64_t left_;
    sha256 sha_;
    std::vector<uint8_t> buf_;
    size_t pos_ = 0;
};

status bad(const std::string& path, const std::string& why) {
    return {status_code::bad_payload, path + ": " + why};
}

// Opens an existing cache file. A FIFO, device, socket, directory or symbolic link carrying an
// entry's name is refused without being opened in a way that blocks or follows it: lstat first
// (nothing is opened for what is not a regular file), then O_NOFOLLOW | O_NONBLOCK and fstat
// (the name may have changed in between). Refusals are status_code::invalid_argument: not a
// cache file at all, as opposed to bad_payload (a cache file with bad contents).
int open_regular(const std::string& path, int flags, status* err) {
    struct stat sb;
    if (::lstat(path.c_str(), &sb) != 0) {
        *err = {status_code::invalid_argument, path + ": cannot open: " + errno_text()};
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        *err = {status_code::invalid_argument,
                path + ": not a regular file (" + file_kind(sb.st_mode) + ")"};
        return -1;
    }
    const int fd = ::open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *err = {status_code::invalid_argument,
                path + ": cannot open: " + (errno == ELOOP ? "a symbolic link" : errno_text())};
        return -1;
    }
    if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        ::close(fd);
        *err = {status_code::invalid_argument, path + ": not a regular file"};
        return -1;
    }
    const int fl = ::fcntl(fd, F_GETFL);
    if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

// Reads the integrity section at the end of the file.
bool read_integrity(int fd, uint64_t file_size, uint8_t digest[32], uint64_t* fingerprint) {
    uint8_t sec[k_integrity_bytes];
    if (::pread(fd, sec, sizeof sec, static_cast<off_t>(file_size - k_integrity_bytes)) !=
        static_cast<ssize_t>(sizeof sec))
        return false;
    if (sec[0] != 'K' || sec[1] != 'I' || sec[2] != 'S' || sec[3] != 1) return false;
    std::memcpy(digest, sec + 4, 32);
    *fingerprint = get_u64(sec + 36);
    return true;
}

}  // namespace

const char* reason_name(save_reason r) {
    switch (r) {
        case save_reason::cold:
            return "cold";
        case save_reason::continued:
            return "continued";
        case save_reason::evict:
            return "evict";
        case save_reason::shutdown:
            return "shutdown";
        case save_reason::agent_system:
            return "agent-system";
        case save_reason::agent_session:
            return "agent-session";
        default:
            return "unknown";
    }
}

const char* file_kind(unsigned mode) {
    switch (mode & S_IFMT) {
        case S_IFREG:
            return "regular file";
        case S_IFDIR:
            return "directory";
        case S_IFLNK:
            return "symbolic link";
        case S_IFIFO:
            return "FIFO";
        case S_IFSOCK:
            return "socket";
        case S_IFCHR:
            return "character device";
        case S_IFBLK:
            return "block device";
        default:
            return "unknown kind";
    }
}

bool is_entry_name(std::string_view n) {
    return n.size() == 43 && n.substr(40) == ".kv" && n.find_first_not_of("0123456789abcdef") == 40;
}

bool is_temp_name(std::string_view n, long* pid) {
    if (n.size() < 49 || n.substr(40, 8) != ".kv.tmp." ||
        n.find_first_not_of("0123456789abcdef") != 40)
        return false;
    const std::string_view rest = n.substr(48);
    const size_t dot = rest.find('.');
    const std::string_view p = rest.substr(0, dot);
    if (p.empty() || p.size() > 9 || p.find_first_not_of("0123456789") != std::string::npos)
        return false;
    if (dot != std::string_view::npos) {
        const std::string_view k = rest.substr(dot + 1);
        if (k.empty() || k.size() > 2 || k.find_first_not_of("0123456789") != std::string::npos)
            return false;
    }
    if (pid) *pid = std::stol(std::string(p));
    return true;
}

uint64_t unix_now() {
    return static_cast<uint64_t>(std::time(nullptr));
}

void encode_header(const kv_header& h, uint8_t out[k_header_bytes]) {
    std::memset(out, 0, k_header_bytes);
    out[0] = 'K';
    out[1] = 'V';
    out[2] = 'C';
    out[3] = h.version;
    out[4] = h.quant_bits;
    out[5] = static_cast<uint8_t>(h.reason);
    out[6] = h.ext;
    put_u32(out + 8, h.tokens);
    put_u32(out + 12, h.hits);
    put_u32(out + 16, h.ctx);
    put_u64(out + 24, h.created);
    put_u64(out + 32, h.last_used);
    put_u64(out + 40, h.payload_bytes);
}

kv_header decode_header(const uint8_t in[k_header_bytes]) {
    if (in[0] != 'K' || in[1] != 'V' || in[2] != 'C') throw Error("not a KV cache file (magic)");
    kv_header h;
    h.version = in[3];
    if (h.version != 1) throw Error(strfmt("KV file version %u, expected 1", h.version));
    h.quant_bits = in[4];
    if (h.quant_bits != 2 && h.quant_bits != 4)
        throw Error(strfmt("quant bits %u, expected 2 or 4", h.quant_bits));
    h.reason = in[5] > 6 ? save_reason::unknown : static_cast<save_reason>(in[5]);
    h.ext = in[6];
    h.tokens = get_u32(in + 8);
    if (h.tokens == 0) throw Error("token count 0");
    h.hits = get_u32(in + 12);
    h.ctx = get_u32(in + 16);
    h.created = get_u64(in + 24);
    h.last_used = get_u64(in + 32);
    h.payload_bytes = get_u64(in + 40);
    return h;
}

std::string sha1_hex(std::string_view text) {
    uint8_t d[SHA_DIGEST_LENGTH];
    SHA1(reinterpret_cast<const unsigned char*>(text.data()), text.size(), d);
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (uint8_t b : d) {
        out += hex[b >> 4];
        out += hex[b & 15];
    }
    return out;
}

std::string file_name_for(std::string_view key_text) {
    return sha1_hex(key_text) + ".kv";
}

status write_file(const std::string& dir, const Session& session, const model_identity& id,
                  const write_request& req, std::string* path_out) {
    if (session.n_past() == 0) return {status_code::invalid_argument, "kv store: empty session"};
    if (req.key_text.size() > k_max_text)
        return {status_code::invalid_argument, "kv store: key text too long"};
    const std::string name = file_name_for(req.key_text);
    const std::string path = dir + "/" + name;
    // A new file, never an existing name: O_EXCL refuses a leftover or a planted name (and a
    // symbolic link there is never followed); the next candidate name is tried instead.
    std::string tmp;
    fd_guard f(-1);
    for (int k = 0; k < k_temp_names && f.fd < 0; ++k) {
        tmp = strfmt("%s.tmp.%d", path.c_str(), static_cast<int>(::getpid()));
        if (k > 0) tmp += strfmt(".%d", k);
        f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (f.fd < 0 && errno != EEXIST)
            return {status_code::internal, "kv store: cannot create " + tmp + ": " + errno_text()};
    }
    if (f.fd < 0)
        return {status_code::internal, "kv store: cannot create a temp file for " + path +
                                           ": every candidate name exists"};
    auto fail = [&](const std::string& why) -> status {
        ::unlink(tmp.c_str());
        return {status_code::internal, "kv store: " + tmp + ": " + why};
    };

    kv_header h;
    h.quant_bits = id.quant_bits;
    h.reason = req.reason;
    h.ext = static_cast<uint8_t>(req.key_flags & (k_ext_responses_key | k_ext_thinking_key)) |
            k_ext_integrity;
    if (req.tools && !req.tools->empty()) h.ext |= k_ext_tool_map;
    h.tokens = static_cast<uint32_t>(session.n_past());
    h.ctx = static_cast<uint32_t>(session.n_ctx());
    h.created = req.now ? req.now : unix_now();
    h.last_used = h.created;
    h.payload_bytes = session.payload_size();
    uint8_t hb[k_header_bytes];
    encode_header(h, hb);
    if (!write_all(f.fd, hb, sizeof hb)) return fail("write failed: " + errno_text());

    hashed_writer w(f.fd);
    bool ok = w.put_u32(static_cast<uint32_t>(req.key_text.size())) &&
              w.put(req.key_text.data(), req.key_text.size());
    if (!ok) return fail("write failed: " + errno_text());
    const status st = session.save_payload([&](const void* p, size_t n) { return w.put(p, n); });
    if (!st.ok()) return fail(st.message() + " (" + errno_text() + ")");
    if (h.ext & k_ext_tool_map) {
        ok = w.put("KTM\x01", 4) && w.put_u32(static_cast<uint32_t>(req.tools->size()));
        for (const auto& [tid, dsml] : *req.tools) {
            ok = ok && w.put_u32(static_cast<uint32_t>(tid.size())) &&
                 w.put_u32(static_cast<uint32_t>(dsml.size())) && w.put(tid.data(), tid.size()) &&
                 w.put(dsml.data(), dsml.size());
        }
        if (!ok) return fail("write failed: " + errno_text());
    }
    if (!w.flush()) return fail("write failed: " + errno_text());
    uint8_t sec[k_integrity_bytes] = {'K', 'I', 'S', 1};
    w.digest(sec + 4);
    put_u64(sec + 36, id.fingerprint);
    if (!write_all(f.fd, sec, sizeof sec)) return fail("write failed: " + errno_text());
    if (::fsync(f.fd) != 0) return fail("fsync failed: " + errno_text());
    const int closed = ::close(f.fd);
    f.fd = -1;
    if (closed != 0) return fail("close failed: " + errno_text());
    // rename never follows a symbolic link at the final name: it replaces the link itself.
    if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename failed: " + errno_text());
    fd_guard d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (d.fd >= 0) ::fsync(d.fd);
    if (path_out) *path_out = path;
    return {};
}

status inspect_file(const std::string& path, file_info* out) {
    status err;
    fd_guard f(open_regular(path, O_RDONLY, &err));
    if (f.fd < 0) return err;
    struct stat sb;
    if (::fstat(f.fd, &sb) != 0) return bad(path, "cannot stat: " + errno_text());
    file_info fi;
    fi.path = path;
    const size_t slash = path.find_last_of('/');
    fi.name = path.substr(slash == std::string::npos ? 0 : slash + 1);
    if (fi.name.size() > 3 && fi.name.compare(fi.name.size() - 3, 3, ".kv") == 0)
        fi.name.resize(fi.name.size() - 3);
    fi.file_size = static_cast<uint64_t>(sb.st_size);
    uint8_t head[k_header_bytes + 4];
    if (fi.file_size < sizeof head || !read_all(f.fd, head, sizeof head))
        return bad(path, strfmt("truncated header (%llu bytes)",
                                static_cast<unsigned long long>(fi.file_size)));
    try {
        fi.header = decode_header(head);
    } catch (const Error& e) {
        return bad(path, e.what());
    }
    fi.text_len = get_u32(head + k_header_bytes);
    if (fi.text_len > k_max_text) return bad(path, "implausible key text length");
    if (!(fi.header.ext & k_ext_integrity)) return bad(path, "no integrity section");
    const uint64_t need =
        k_header_bytes + 4 + fi.text_len + fi.header.payload_bytes + k_integrity_bytes;
    if (fi.header.payload_bytes == 0 || fi.file_size < need)
        return bad(path, strfmt("truncated: %llu bytes, at least %llu expected",
                                static_cast<unsigned long long>(fi.file_size),
                                static_cast<unsigned long long>(need)));
    if (!(fi.header.ext & k_ext_tool_map) && fi.file_size != need)
        return bad(
            path, strfmt("%llu bytes, expected %llu", static_cast<unsigned long long>(fi.file_size),
                         static_cast<unsigned long long>(need)));
    uint8_t digest[32];
    if (!read_integrity(f.fd, fi.file_size, digest, &fi.fingerprint))
        return bad(path, "damaged integrity section");
    *out = std::move(fi);
    return {};
}

namespace {

// The tool-id map section ("KTM\x01", count, then per entry id length, block length, id,
// block) from its bytes, every length bounded by the section.
status parse_tool_map(const std::string& path, const uint8_t* p, uint64_t n, tool_map* out) {
    if (n < 8 || std::memcmp(p, "KTM\x01", 4) != 0) return bad(path, "damaged tool-id map");
    const uint32_t count = get_u32(p + 4);
    if (count > k_max_tool_entries) return bad(path, "damaged tool-id map");
    tool_map map;
    uint64_t used = 8;
    for (uint32_t i = 0; i < count; ++i) {
        if (used + 8 > n) return bad(path, strfmt("damaged tool-id map entry %u", i));
        const uint32_t il = get_u32(p + used), dl = get_u32(p + used + 4);
        if (il < 1 || il > k_max_tool_id || dl < 1 || dl > k_max_tool_dsml ||
            used + 8 + il + dl > n)
            return bad(path, strfmt("damaged tool-id map entry %u", i));
        map.emplace_back(std::string(reinterpret_cast<const char*>(p + used + 8), il),
                         std::string(reinterpret_cast<const char*>(p + used + 8 + il), dl));
        used += 8ull + il + dl;
    }
    if (used != n) return bad(path, "bytes after the tool-id map");
    *out = std::move(map);
    return {};
}

// Streams [48, end of the tool map) through the hash, handing the payload to `session` when
// given; checks the name, the tool map and the checksum.
status read_body(const std::string& path, const file_info& fi, Session* session,
                 std::string* key_text, tool_map* tools) {
    status err;
    fd_guard f(open_regular(path, O_RDONLY, &err));
    if (f.fd < 0) return err;
    if (::lseek(f.fd, static_cast<off_t>(k_header_bytes), SEEK_SET) < 0)
        return bad(path, "seek failed");
    const uint64_t body = fi.file_size - k_header_bytes - k_integrity_bytes;
    hashed_reader r(f.fd, body);
    uint32_t text_len = 0;
    std::string text;
    if (!r.get_u32(&text_len) || text_len != fi.text_len) return bad(path, "key text length");
    text.resize(text_len);
    if (!r.get(text.data(), text_len)) return bad(path, "truncated key text");
    if (sha1_hex(text) != fi.name) return bad(path, "key text does not match the file name");
    uint64_t payload_left = fi.header.payload_bytes;
    if (session) {
        const status st = session->load_payload(
            [&](void* p, size_t n) {
                if (n > payload_left) return false;
                payload_left -= n;
                return r.get(p, n);
            },
            fi.header.payload_bytes);
        if (!st.ok()) return bad(path, st.message());
        if (session->n_past() != static_cast<int64_t>(fi.header.tokens)) {
            session->reset();
            return bad(path, "token count of the payload differs from the header");
        }
    } else {
        std::vector<uint8_t> skip(std::min<uint64_t>(payload_left, k_io_chunk));
        while (payload_left > 0) {
            const size_t k = static_cast<size_t>(std::min<uint64_t>(payload_left, skip.size()));
            if (!r.get(skip.data(), k)) return bad(path, "truncated payload");
            payload_left -= k;
        }
    }
    tool_map map;
    const uint64_t map_bytes =
        body - 4 - fi.text_len - fi.header.payload_bytes;  // what lies before the integrity
    if (fi.header.ext & k_ext_tool_map) {
        if (map_bytes > k_max_tool_map_bytes) return bad(path, "damaged tool-id map");
        std::vector<uint8_t> bytes(static_cast<size_t>(map_bytes));
        if (!r.get(bytes.data(), bytes.size())) return bad(path, "truncated tool-id map");
        if (status st = parse_tool_map(path, bytes.data(), bytes.size(), &map); !st.ok()) return st;
    } else if (map_bytes != 0) {
        return bad(path, "unexpected bytes after the payload");
    }
    uint8_t want[32], got[32];
    uint64_t fp = 0;
    if (!read_integrity(f.fd, fi.file_size, want, &fp))
        return bad(path, "damaged integrity section");
    r.digest(got);
    if (std::memcmp(want, got, 32) != 0) {
        if (session) session->reset();
        return bad(path, "checksum mismatch (the file is corrupt)");
    }
    if (key_text) *key_text = std::move(text);
    if (tools) *tools = std::move(map);
    return {};
}

}  // namespace

status verify_file(const std::string& path, file_info* info) {
    file_info fi;
    status st = inspect_file(path, &fi);
    if (!st.ok()) return st;
    st = read_body(path, fi, nullptr, nullptr, nullptr);
    if (!st.ok()) return st;
    if (info) *info = std::move(fi);
    return {};
}

status read_tool_map(const std::string& path, tool_map* out) {
    out->clear();
    file_info fi;
    status st = inspect_file(path, &fi);
    if (!st.ok()) return st;
    if (!(fi.header.ext & k_ext_tool_map)) return {};
    const uint64_t at = k_header_bytes + 4 + fi.text_len + fi.header.payload_bytes;
    const uint64_t n = fi.file_size - at - k_integrity_bytes;  // inspect_file checked the sizes
    if (n > k_max_tool_map_bytes) return bad(path, "damaged tool-id map");
    fd_guard f(open_regular(path, O_RDONLY, &st));
    if (f.fd < 0) return st;
    std::vector<uint8_t> bytes(static_cast<size_t>(n));
    if (::lseek(f.fd, static_cast<off_t>(at), SEEK_SET) < 0 ||
        !read_all(f.fd, bytes.data(), bytes.size()))
        return bad(path, "truncated tool-id map");
    return parse_tool_map(path, bytes.data(), bytes.size(), out);
}

status read_key_text(const std::string& path, std::string* text) {
    file_info fi;
    status st = inspect_file(path, &fi);
    if (!st.ok()) return st;
    fd_guard f(open_regular(path, O_RDONLY, &st));
    if (f.fd < 0) return st;
    text->resize(fi.text_len);
    if (::pread(f.fd, text->data(), fi.text_len, k_header_bytes + 4) !=
        static_cast<ssize_t>(fi.text_len))
        return bad(path, "truncated key text");
    return {};
}

status load_file(const std::string& path, Session& session, const model_identity& id,
                 std::string* key_text, tool_map* tools) {
    file_info fi;
    status st = inspect_file(path, &fi);
    if (!st.ok()) return st;
    if (fi.fingerprint != id.fingerprint)
        return bad(path, strfmt("written for another model (fingerprint %016llx, this model "
                                "%016llx)",
                                static_cast<unsigned long long>(fi.fingerprint),
                                static_cast<unsigned long long>(id.fingerprint)));
    if (fi.header.ctx > session.n_ctx() || fi.header.tokens >= session.n_ctx())
        return {
            status_code::context_full,
            strfmt("%s: %u tokens of a %u-token context do not fit a session of %lld", path.c_str(),
                   fi.header.tokens, fi.header.ctx, static_cast<long long>(session.n_ctx()))};
    return read_body(path, fi, &session, key_text, tools);
}

status touch_file(const std::string& path, uint64_t now) {
    status err;
    fd_guard f(open_regular(path, O_RDWR, &err));
    if (f.fd < 0) return err;
    uint8_t hb[k_header_bytes];
    if (::pread(f.fd, hb, sizeof hb, 0) != static_cast<ssize_t>(sizeof hb))
        return bad(path, "truncated header");
    kv_header h;
    try {
        h = decode_header(hb);
    } catch (const Error& e) {
        return bad(path, e.what());
    }
    h.hits += 1;
    h.last_used = now ? now : unix_now();
    encode_header(h, hb);
    if (::pwrite(f.fd, hb, sizeof hb, 0) != static_cast<ssize_t>(sizeof hb))
        return {status_code::internal, path + ": header rewrite failed: " + errno_text()};
    return {};
}

}  // namespace magnetar::kvstore
