// Helpers shared by the test executables: fixture paths and temporary files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace magnetar::test {

// Folder of the shared golden data (MAGNETAR_SHARED_DIR env var overrides the build default).
std::string shared_dir();
// Path of the built magnetar binary.
std::string magnetar_bin();
// A fresh temporary directory, removed at process exit.
std::string temp_dir();
// Whole file as bytes; throws std::runtime_error naming the file if it cannot be read.
std::vector<uint8_t> read_file(const std::string& path);
std::vector<float> read_f32(const std::string& path);
void write_file(const std::string& path, const std::vector<uint8_t>& bytes);
// Runs a shell command, returns its exit status and captures stdout+stderr into *out.
int run_command(const std::string& cmd, std::string* out);

}  // namespace magnetar::test
