#include "support/test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace magnetar::test {

namespace fs = std::filesystem;

std::string shared_dir() {
    if (const char* e = std::getenv("MAGNETAR_SHARED_DIR"); e && *e) return e;
    return MAGNETAR_SHARED_DIR;
}

std::string magnetar_bin() {
    return std::string(MAGNETAR_BIN_DIR) + "/magnetar";
}

namespace {
struct TempRoot {
    std::string path;
    TempRoot() {
        std::string tmpl = (fs::temp_directory_path() / "magnetar-test-XXXXXX").string();
        if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
        path = tmpl;
    }
    ~TempRoot() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};
}  // namespace

std::string temp_dir() {
    static TempRoot root;
    static int counter = 0;
    std::string dir = root.path + "/t" + std::to_string(counter++);
    fs::create_directories(dir);
    return dir;
}

std::vector<uint8_t> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read test fixture: " + path);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)),
                                std::istreambuf_iterator<char>());
}

std::vector<float> read_f32(const std::string& path) {
    auto bytes = read_file(path);
    if (bytes.size() % 4 != 0) throw std::runtime_error("not a float32 file: " + path);
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), bytes.size());
    return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
    if (!f) throw std::runtime_error("cannot write " + path);
}

int run_command(const std::string& cmd, std::string* out) {
    std::string full = cmd + " 2>&1";
    FILE* p = popen(full.c_str(), "r");
    if (!p) return -1;
    char buf[4096];
    size_t n;
    std::string text;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    int st = pclose(p);
    if (out) *out = text;
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return -1;
}

}  // namespace magnetar::test
