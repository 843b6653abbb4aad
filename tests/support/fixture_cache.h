// Disk cache for expensive test fixtures (generated models, reference outputs).
//
// ctest runs every test case of an executable as its own process, so fixtures that take
// seconds to build (a 300 MB model, a float64 reference run) are kept in the build tree and
// shared by all processes: `cached_dir(name, key, make)` returns build/test-cache/NAME, rebuilt
// with make(dir) whenever its recorded key differs from `key`. A lock file serializes
// concurrent builders (ctest -j); a fixture is built in a temporary folder and renamed into
// place, so a crash never leaves a half-written fixture behind.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace magnetar::test {

inline std::string fixture_cache_root() {
    const std::string root = std::string(MAGNETAR_BIN_DIR) + "/../test-cache";
    std::filesystem::create_directories(root);
    return root;
}

// FNV-1a over the bytes of files (missing files hash as empty) and extra strings.
inline uint64_t hash_inputs(const std::vector<std::string>& files, const std::string& extra) {
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](const char* p, size_t n) {
        for (size_t i = 0; i < n; ++i) {
            h ^= static_cast<unsigned char>(p[i]);
            h *= 0x100000001b3ull;
        }
    };
    std::vector<char> buf(1 << 20);
    for (const std::string& f : files) {
        mix(f.data(), f.size());
        std::ifstream in(f, std::ios::binary);
        while (in) {
            in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
            mix(buf.data(), static_cast<size_t>(in.gcount()));
        }
    }
    mix(extra.data(), extra.size());
    return h;
}

inline std::string read_text(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

inline std::string cached_dir(const std::string& name, const std::string& key,
                              const std::function<void(const std::string& dir)>& make) {
    namespace fs = std::filesystem;
    const std::string root = fixture_cache_root();
    const std::string dir = root + "/" + name;
    const std::string lock_path = root + "/" + name + ".lock";
    const int fd = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
    if (fd < 0) throw std::runtime_error("cannot open lock " + lock_path);
    ::flock(fd, LOCK_EX);
    try {
        if (read_text(dir + "/KEY") != key) {
            const std::string tmp = dir + ".tmp";
            fs::remove_all(tmp);
            fs::create_directories(tmp);
            make(tmp);
            std::ofstream(tmp + "/KEY") << key;
            fs::remove_all(dir);
            fs::rename(tmp, dir);
        }
    } catch (...) {
        ::flock(fd, LOCK_UN);
        ::close(fd);
        throw;
    }
    ::flock(fd, LOCK_UN);
    ::close(fd);
    return dir;
}

}  // namespace magnetar::test
