// `magnetar bench` (the model walk) on the tiny model with tiny frontiers: the CSV columns and
// values (monotone frontiers, positive rates and byte counts), the SVG chart (well-formed XML
// with both series, axes and legend), the projection columns, the chat input and --step-mul,
// the sub-commands that share the `bench` name, and a DeepSeek V4.1 file (v41-tiny with the
// DeepSeek tokenizer) walked with the V4.1 byte model. Label `slow`: it runs the whole engine.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gen-model/gen_model.h"
#include "support/fixture_cache.h"
#include "support/test_support.h"
#include "support/tiny_models.h"

namespace magnetar {
namespace {

// models/magnetar-tiny.gguf of the checkout, else the same recipe generated into the cache.
const std::string& bench_model() {
    static const std::string path = [] {
        const std::string embedded =
            std::string(MAGNETAR_SOURCE_DIR) + "/models/magnetar-tiny.gguf";
        if (std::filesystem::exists(embedded)) return embedded;
        const std::string dir =
            test::cached_dir("bench-model-tiny-f32", "tiny-f32-1", [](const std::string& out) {
                genmodel::options o;
                o.preset = "tiny";
                o.weights = genmodel::parse_weight_scheme("f32");
                o.seed = 1;
                o.output = out + "/model.gguf";
                o.quiet = true;
                genmodel::generate(o);
            });
        return dir + "/model.gguf";
    }();
    return path;
}

struct run_out {
    int rc = -1;
    std::string out, err;
};

run_out run_bench(const std::string& args) {
    const std::string dir = test::temp_dir();
    const std::string o = dir + "/stdout", e = dir + "/stderr";
    const std::string cmd = test::magnetar_bin() + " bench " + args + " >" + o + " 2>" + e;
    run_out r;
    const int st = std::system(cmd.c_str());
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    auto slurp = [](const std::string& p) {
        std::ifstream f(p, std::ios::binary);
        std::stringstream ss;
        ss << f.rdbuf();
        return ss.str();
    };
    r.out = slurp(o);
    r.err = slurp(e);
    return r;
}

std::string text_file() {
    const std::string path = test::temp_dir() + "/text.txt";
    std::ofstream f(path);
    f << "The quick brown fox jumps over the lazy dog. Benchmarks walk a text to growing context "
         "frontiers, and every frontier times the prefill of the new interval and a short greedy "
         "generation.\n";
    return path;
}

using csv_table = std::vector<std::map<std::string, double>>;

csv_table parse_csv(const std::string& text, std::vector<std::string>* header) {
    std::stringstream in(text);
    std::string line;
    EXPECT_TRUE(static_cast<bool>(std::getline(in, line)));
    header->clear();
    {
        std::stringstream ss(line);
        for (std::string c; std::getline(ss, c, ',');) header->push_back(c);
    }
    csv_table rows;
    while (std::getline(in, line)) {
        std::vector<std::string> f;
        std::stringstream ss(line);
        for (std::string c; std::getline(ss, c, ',');) f.push_back(c);
        EXPECT_EQ(f.size(), header->size()) << line;
        std::map<std::string, double> row;
        for (size_t i = 0; i < f.size() && i < header->size(); ++i)
            row[(*header)[i]] = std::stod(f[i]);
        rows.push_back(row);
    }
    return rows;
}

// Minimal XML well-formedness: declaration, comments, balanced elements, quoted attributes.
bool well_formed_xml(const std::string& s, std::string* why) {
    std::vector<std::string> stack;
    size_t i = 0;
    int roots = 0;
    while ((i = s.find('<', i)) != std::string::npos) {
        if (s.compare(i, 5, "<?xml") == 0) {
            i = s.find("?>", i);
            if (i == std::string::npos) return *why = "unterminated declaration", false;
            continue;
        }
        const size_t end = s.find('>', i);
        if (end == std::string::npos) return *why = "unterminated tag", false;
        std::string tag = s.substr(i + 1, end - i - 1);
        size_t quotes = 0;
        for (char c : tag) quotes += c == '"';
        if (quotes % 2) return *why = "unbalanced quotes in <" + tag + ">", false;
        if (tag.empty()) return *why = "empty tag", false;
        if (tag[0] == '/') {
            if (stack.empty() || stack.back() != tag.substr(1)) {
                return *why = "mismatched </" + tag.substr(1) + ">", false;
            }
            stack.pop_back();
        } else if (tag.back() != '/') {
            if (stack.empty()) ++roots;
            stack.push_back(tag.substr(0, tag.find_first_of(" \t\n")));
        } else if (stack.empty()) {
            ++roots;
        }
        i = end + 1;
    }
    if (!stack.empty()) return *why = "unclosed <" + stack.back() + ">", false;
    if (roots != 1) return *why = "expected one root element", false;
    return true;
}

const std::vector<std::string> kColumns = {"ctx_tokens",
                                           "prefill_tokens",
                                           "prefill_tps",
                                           "gen_tokens",
                                           "gen_tps",
                                           "kvcache_bytes",
                                           "weight_bytes_per_token",
                                           "kv_bytes_per_token",
                                           "achieved_gbs",
                                           "read_gbs",
                                           "roofline_ratio",
                                           "prefill_gflops",
                                           "dot_gops",
                                           "prefill_dot_ratio"};

TEST(BenchSmoke, WalkCsvSvgAndProjection) {
    const std::string svg = test::temp_dir() + "/chart.svg";
    const std::string args = "-m " + bench_model() + " -t 2 --prompt-file " + text_file() +
                             " --ctx-start 64 --ctx-max 192 --step-incr 64 --gen-tokens 4"
                             " --read-mb 64 --project-layers 43 --svg " +
                             svg;
    const run_out r = run_bench(args);
    ASSERT_EQ(r.rc, 0) << r.err;

    std::vector<std::string> header;
    const csv_table rows = parse_csv(r.out, &header);
    std::vector<std::string> want = kColumns;
    want.push_back("proj_prefill_tps");
    want.push_back("proj_gen_tps");
    EXPECT_EQ(header, want);
    ASSERT_EQ(rows.size(), 3u) << r.out;
    for (size_t i = 0; i < rows.size(); ++i) {
        const auto& row = rows[i];
        EXPECT_EQ(row.at("ctx_tokens"), 64.0 * static_cast<double>(i + 1));
        EXPECT_EQ(row.at("prefill_tokens"), 64.0);
        EXPECT_EQ(row.at("gen_tokens"), 4.0);
        for (const char* c :
             {"prefill_tps", "gen_tps", "kvcache_bytes", "weight_bytes_per_token",
              "kv_bytes_per_token", "achieved_gbs", "read_gbs", "roofline_ratio", "prefill_gflops",
              "dot_gops", "prefill_dot_ratio", "proj_prefill_tps", "proj_gen_tps"}) {
            EXPECT_GT(row.at(c), 0.0) << c << " at row " << i;
        }
        // The ratio is the quotient of the two printed columns (3 decimals printed).
        EXPECT_NEAR(row.at("prefill_dot_ratio"), row.at("prefill_gflops") / row.at("dot_gops"),
                    0.0006 + 0.01 * row.at("prefill_dot_ratio"));
        if (i > 0) {
            EXPECT_GT(row.at("ctx_tokens"), rows[i - 1].at("ctx_tokens"));
            EXPECT_GT(row.at("kvcache_bytes"), rows[i - 1].at("kvcache_bytes"));
            EXPECT_GE(row.at("kv_bytes_per_token"), rows[i - 1].at("kv_bytes_per_token"));
        }
        // Projecting the 6-layer model to 43 layers can only slow it down.
        EXPECT_LT(row.at("proj_gen_tps"), row.at("gen_tps"));
        EXPECT_LT(row.at("proj_prefill_tps"), row.at("prefill_tps"));
    }
    EXPECT_NE(r.err.find("streaming read"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("dot throughput int8"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("projected to 43 layers"), std::string::npos) << r.err;

    std::ifstream f(svg);
    ASSERT_TRUE(f.good()) << svg;
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string doc = ss.str();
    std::string why;
    EXPECT_TRUE(well_formed_xml(doc, &why)) << why;
    EXPECT_EQ(doc.rfind("<?xml", 0), 0u);
    for (const char* id :
         {"<svg xmlns=\"http://www.w3.org/2000/svg\"", "id=\"series-prefill\"",
          "id=\"series-generation\"", "id=\"series-prefill-projected\"",
          "id=\"series-generation-projected\"", "id=\"legend\"", "id=\"x-axis\"",
          "id=\"y-axis-prefill\"", "id=\"y-axis-generation\"", "<polyline", "context (tokens)",
          ">prefill t/s (left axis)<", ">generation t/s, 43 layers (projected)<",
          // Tooltips name their series.
          "<title>prefill t/s (left axis) at 64 tokens: ",
          "<title>generation t/s, 43 layers (projected) at 192 tokens: "}) {
        EXPECT_NE(doc.find(id), std::string::npos) << id;
    }
    size_t circles = 0;
    for (size_t p = 0; (p = doc.find("<circle", p)) != std::string::npos; ++p) ++circles;
    EXPECT_EQ(circles, 12u);  // 3 frontiers x (2 measured + 2 projected series)
    // The projected points are the CSV's projected columns.
    const std::string first = "<title>generation t/s, 43 layers (projected) at 64 tokens: ";
    const size_t at = doc.find(first);
    ASSERT_NE(at, std::string::npos);
    EXPECT_NEAR(std::strtod(doc.c_str() + at + first.size(), nullptr), rows[0].at("proj_gen_tps"),
                0.01 * rows[0].at("proj_gen_tps") + 0.01);

    // The two-model projection: a base CSV of a "2-layer" model far faster per token (so the
    // difference gives a positive per-layer time despite timing noise).
    const std::string base = test::temp_dir() + "/base.csv";
    {
        std::ofstream b(base);
        b << "ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps\n";
        for (const auto& row : rows) {
            b << row.at("ctx_tokens") << ",64," << 20 * row.at("prefill_tps") << ",4,"
              << 20 * row.at("gen_tps") << "\n";
        }
    }
    const std::string csv = test::temp_dir() + "/walk.csv";
    const run_out r2 = run_bench("-m " + bench_model() + " -t 2 --prompt-file " + text_file() +
                                 " --ctx-start 64 --ctx-max 64 --gen-tokens 4 --read-mb 64"
                                 " --project-layers 43 --project-base " +
                                 base + " --project-base-layers 2 --csv " + csv);
    ASSERT_EQ(r2.rc, 0) << r2.err;
    EXPECT_EQ(r2.out, "");  // the CSV went to the file
    std::ifstream cf(csv);
    std::stringstream cs;
    cs << cf.rdbuf();
    const csv_table rows2 = parse_csv(cs.str(), &header);
    ASSERT_EQ(rows2.size(), 1u);
    // The tiny model has 6 layers: t(43) = t_fixed + 43 t_layer with t_layer = (t6 - t2) / 4,
    // t_fixed = t6 - 6 t_layer.
    auto proj = [](double tps6, double tps2) {
        const double t6 = 1 / tps6, t2 = 1 / tps2, tl = (t6 - t2) / 4;
        return 1 / (t6 - 6 * tl + 43 * tl);
    };
    const auto& row = rows2[0];
    const double base_pre = 20 * rows[0].at("prefill_tps"), base_gen = 20 * rows[0].at("gen_tps");
    if (row.at("gen_tps") < base_gen && row.at("prefill_tps") < base_pre) {
        EXPECT_NE(r2.err.find("difference with the 2-layer CSV"), std::string::npos) << r2.err;
        EXPECT_NEAR(row.at("proj_gen_tps"), proj(row.at("gen_tps"), base_gen),
                    0.02 * row.at("proj_gen_tps") + 0.01);
        EXPECT_NEAR(row.at("proj_prefill_tps"), proj(row.at("prefill_tps"), base_pre),
                    0.02 * row.at("proj_prefill_tps") + 0.01);
    }
}

TEST(BenchSmoke, ChatInputGeometricSteps) {
    const run_out r = run_bench("-m " + bench_model() + " -t 2 --chat-prompt-file " + text_file() +
                                " --ctx-start 50 --ctx-max 200 --step-mul 2 --gen-tokens 2"
                                " --read-mb 64");
    ASSERT_EQ(r.rc, 0) << r.err;
    std::vector<std::string> header;
    const csv_table rows = parse_csv(r.out, &header);
    EXPECT_EQ(header, kColumns);
    ASSERT_EQ(rows.size(), 3u) << r.out;  // 50, 100, 200
    EXPECT_EQ(rows[0].at("ctx_tokens"), 50);
    EXPECT_EQ(rows[1].at("ctx_tokens"), 100);
    EXPECT_EQ(rows[2].at("ctx_tokens"), 200);
    EXPECT_EQ(rows[2].at("prefill_tokens"), 100);
}

// --sessions N: N sessions stepped together against one alone, in extra columns and a summary
// line per frontier.
TEST(BenchSmoke, SessionsDecodingTogether) {
    const run_out r = run_bench("-m " + bench_model() + " -t 2 --prompt-file " + text_file() +
                                " --ctx-start 64 --ctx-max 128 --step-incr 64 --gen-tokens 4"
                                " --read-mb 64 --sessions 3");
    ASSERT_EQ(r.rc, 0) << r.err;
    std::vector<std::string> header;
    const csv_table rows = parse_csv(r.out, &header);
    std::vector<std::string> want = kColumns;
    for (const char* c : {"solo_gen_tps", "batch_sessions", "batch_gen_tps", "batch_ratio"})
        want.push_back(c);
    EXPECT_EQ(header, want);
    ASSERT_EQ(rows.size(), 2u) << r.out;
    for (const auto& row : rows) {
        EXPECT_EQ(row.at("batch_sessions"), 3);
        EXPECT_GT(row.at("solo_gen_tps"), 0);
        EXPECT_GT(row.at("batch_gen_tps"), 0);
        EXPECT_NEAR(row.at("batch_ratio"), row.at("batch_gen_tps") / row.at("solo_gen_tps"), 0.01);
    }
    EXPECT_NE(r.err.find("3 sessions together:"), std::string::npos) << r.err;
    // The decode-step breakdown by op group, once per frontier, its shares closed by the rest.
    for (const char* ctx : {"ctx     64  decode step ", "ctx    128  decode step "}) {
        const size_t at = r.err.find(ctx);
        ASSERT_NE(at, std::string::npos) << ctx << "\n" << r.err;
        const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
        EXPECT_NE(line.find(" matmul "), std::string::npos) << line;
        EXPECT_NE(line.find("not in an op group "), std::string::npos) << line;
    }
    const run_out bad =
        run_bench("-m " + bench_model() + " --prompt-file " + text_file() + " --sessions 1");
    EXPECT_NE(bad.rc, 0);
    EXPECT_NE(bad.err.find("--sessions"), std::string::npos) << bad.err;
}

// Past 1000 tokens every context tick is in thousands with the same decimals, and without
// --read-mb the bandwidth probe is sized to the model (its weights, at least 64 MiB).
TEST(BenchSmoke, ThousandsTicksAndAProbeSizedToTheModel) {
    const std::string svg = test::temp_dir() + "/ticks.svg";
    const run_out r = run_bench("-m " + bench_model() + " -t 2 --prompt-file " + text_file() +
                                " --ctx-start 500 --ctx-max 1500 --step-incr 500 --gen-tokens 2"
                                " --svg " +
                                svg);
    ASSERT_EQ(r.rc, 0) << r.err;
    std::smatch m;
    const std::regex sized(R"(over ([0-9.]+) (MiB|GiB), sized to the model's weights)");
    ASSERT_TRUE(std::regex_search(r.err, m, sized)) << r.err;
    const double mib = std::stod(m[1]) * (m[2] == "GiB" ? 1024 : 1);
    const double file_mib =
        static_cast<double>(std::filesystem::file_size(bench_model())) / 1048576;
    EXPECT_GE(mib, 64.0);
    EXPECT_LE(mib, std::max(64.0, file_mib));
    std::ifstream f(svg);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string doc = ss.str();
    const size_t begin = doc.find("<g id=\"x-axis\">"), end = doc.find("</g>", begin);
    ASSERT_NE(begin, std::string::npos);
    const std::string axis = doc.substr(begin, end - begin);
    const std::regex label(R"(text-anchor="middle">([^<]*)</text>)");
    std::vector<std::string> ticks;
    for (auto it = std::sregex_iterator(axis.begin(), axis.end(), label);
         it != std::sregex_iterator(); ++it) {
        ticks.push_back((*it)[1]);
    }
    ASSERT_GE(ticks.size(), 4u) << axis;
    EXPECT_EQ(ticks.back(), "context (tokens)");
    ticks.pop_back();
    for (const std::string& t : ticks)
        EXPECT_TRUE(t == "0" || std::regex_match(t, std::regex(R"(\d+\.\dk)"))) << t;
}

TEST(BenchSmoke, V41Walk) {
    // v41-tiny at the DeepSeek vocabulary with its tokenizer (the walk's input is text).
    const std::string& model = test::tiny_model_with_tokenizer("v41-tiny", "lossless");
    if (model.empty()) GTEST_SKIP() << "tokenizer.json not installed (scripts/setup.sh)";
    const run_out r = run_bench("-m " + model + " -t 2 --prompt-file " + text_file() +
                                " --ctx-start 16 --ctx-max 48 --step-incr 16 --gen-tokens 3"
                                " --read-mb 64");
    ASSERT_EQ(r.rc, 0) << r.err;
    std::vector<std::string> header;
    const csv_table rows = parse_csv(r.out, &header);
    EXPECT_EQ(header, kColumns);
    ASSERT_EQ(rows.size(), 3u) << r.out;  // 16, 32, 48
    for (size_t i = 0; i < rows.size(); ++i) {
        const auto& row = rows[i];
        EXPECT_EQ(row.at("ctx_tokens"), 16.0 * static_cast<double>(i + 1));
        for (const char* c : {"prefill_tps", "gen_tps", "kvcache_bytes", "weight_bytes_per_token",
                              "kv_bytes_per_token", "achieved_gbs", "roofline_ratio",
                              "prefill_gflops", "prefill_dot_ratio"}) {
            EXPECT_GT(row.at(c), 0.0) << c << " at row " << i;
        }
        // v41-tiny's packed KV read per decode step (tests/model/roofline_test.cpp), positions
        // 16 .. 50: full windows (8 layers x 8 rows x 66 B) and top-4 lists (7 layers x 4 rows x
        // 36 B), plus at most 25 + 25 + 51 + 8 scored keys of 34 B.
        EXPECT_GE(row.at("kv_bytes_per_token"), 4224.0 + 1008.0);
        EXPECT_LE(row.at("kv_bytes_per_token"), 4224.0 + 1008.0 + 109.0 * 34);
        if (i > 0) {
            EXPECT_GE(row.at("kv_bytes_per_token"), rows[i - 1].at("kv_bytes_per_token"));
        }
        // Weights: at least the BF16 head (256 x 129280 x 2 B), less than the whole file (the
        // embedding, Engram tables, unselected experts and DSpark stages are not all read).
        EXPECT_GE(row.at("weight_bytes_per_token"), 256.0 * 129280 * 2);
        EXPECT_LT(row.at("weight_bytes_per_token"),
                  static_cast<double>(std::filesystem::file_size(model)));
    }
}

// `bench serve`: a pass with one client, then one with all of them, every request answered,
// the generated tokens counted from the streams' usage, and the ratio line.
TEST(BenchSmoke, ServeConcurrentClients) {
    const run_out r = run_bench("serve -m " + bench_model() +
                                " -t 2 -c 1024 --clients 3 "
                                "--requests 2 -n 4");
    ASSERT_EQ(r.rc, 0) << r.err;
    std::istringstream in(r.out);
    std::vector<std::vector<std::string>> rows;
    bool header = false;
    for (std::string line; std::getline(in, line);) {
        if (line.rfind("clients", 0) == 0) header = true;
        if (line.empty() || line[0] == '#' || line.rfind("clients", 0) == 0) continue;
        std::istringstream f(line);
        std::vector<std::string> cells;
        for (std::string c; f >> c;) cells.push_back(c);
        rows.push_back(cells);
    }
    EXPECT_TRUE(header) << r.out;
    ASSERT_EQ(rows.size(), 2u) << r.out;
    for (size_t i = 0; i < 2; ++i) {
        ASSERT_EQ(rows[i].size(), 10u) << r.out;
        const int clients = i == 0 ? 1 : 3;
        EXPECT_EQ(std::stoi(rows[i][0]), clients);
        EXPECT_EQ(std::stoi(rows[i][1]), 2 * clients);               // requests
        EXPECT_EQ(std::stoi(rows[i][2]), 0);                         // errors
        EXPECT_EQ(std::stoi(rows[i][3]), 2 * clients * 4) << r.out;  // generated tokens
        EXPECT_GT(std::stod(rows[i][5]), 0.0);                       // aggregate t/s
        EXPECT_LE(std::stod(rows[i][6]), std::stod(rows[i][7]));     // ttft p50 <= p99
    }
    EXPECT_NE(r.out.find("# aggregate rate with 3 clients: "), std::string::npos) << r.out;

    const run_out bad = run_bench("serve --url 127.0.0.1:x");
    EXPECT_EQ(bad.rc, 1);
    EXPECT_NE(bad.err.find("--url: \"127.0.0.1:x\" is not HOST:PORT"), std::string::npos)
        << bad.err;
    // Nobody listens on port 1: the requests fail and say why.
    const run_out none = run_bench("serve --url 127.0.0.1:1 --clients 1 --requests 1 -n 1");
    EXPECT_EQ(none.rc, 1);
    EXPECT_NE(none.err.find("the single client's requests failed (first: no answer"),
              std::string::npos)
        << none.err;
}

// `bench kernels` beside a GGML CPU library: the directory's runnable variant is chosen, the
// peer's rows and the "vs ggml" columns appear, a type the peer lacks gets no peer rows, a
// peer that computes a different product is refused, and a bad location is a clear error.
TEST(BenchSmoke, KernelsBesideTheGgmlPeer) {
    const std::string common =
        "kernels --quick --threads 1 --rounds 1 --prefill-tokens 1 "
        "--set-mb 8 --family f32 --ggml " MAGNETAR_FAKE_GGML_DIR;
    run_out r = run_bench(common + " --types f32 q2_K");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("ggml peer libggml-cpu-fake.so (family 'ggml')"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("agrees with f32 to "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("ggml peer: no q2_K kernel in libggml-cpu-fake.so; no peer rows"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.out.find("\nggml   f32      2048x4096  decode"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("vs ggml"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("hot summary"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("\nggml   q2_K"), std::string::npos) << r.out;

    r = run_bench(common + " --types q8_0");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("the ggml peer (libggml-cpu-fake.so) disagrees with Magnetar on q8_0"),
              std::string::npos)
        << r.err;

    r = run_bench("kernels --quick --types f32 --ggml /nonexistent/libggml-cpu.so");
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("ggml peer: /nonexistent/libggml-cpu.so does not exist"),
              std::string::npos)
        << r.err;
    const std::string empty = test::temp_dir();
    r = run_bench("kernels --quick --types f32 --ggml " + empty);
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("ggml peer: no libggml-cpu*.so in " + empty), std::string::npos) << r.err;
    // Without a peer the table has no peer columns.
    r = run_bench(
        "kernels --quick --threads 1 --rounds 1 --prefill-tokens 1 --set-mb 8 "
        "--family f32 --types f32 --ggml off");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out.find("vs ggml"), std::string::npos) << r.out;
}

TEST(BenchSmoke, SubcommandsAndErrors) {
    run_out r = run_bench("--help");
    EXPECT_EQ(r.rc, 0);
    EXPECT_NE(r.out.find("--ctx-start"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("kernels"), std::string::npos) << r.out;
    r = run_bench("kernels --help");
    EXPECT_EQ(r.rc, 0) << r.err;
    r = run_bench("-m " + bench_model() + " --ctx-start 64 --ctx-max 64");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("--prompt-file"), std::string::npos) << r.err;
    r = run_bench("-m " + bench_model() + " --prompt-file " + text_file() +
                  " --ctx-start 128 --ctx-max 64");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("--ctx-max"), std::string::npos) << r.err;
    // One frontier runs, with a warning that it makes no curve.
    r = run_bench("-m " + bench_model() + " --prompt-file " + text_file() +
                  " --ctx-start 64 --ctx-max 64 -n 2 --read-mb 64 -t 2");
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("bench: warning: one frontier (64 tokens)"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace magnetar
