// The coding transcripts the trained model learned from (scripts/train/corpus.py, kind
// "coding") show the agent's own system preamble, tool contract and tool results: the contract
// file the corpus reads is the agent's, and sample calls drawn by the corpus give, run through
// agent_tools on the corpus's world files, exactly the text the corpus wrote.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/agent.h"
#include "agent/tools.h"
#include "agent/transcript.h"
#include "core/paths.h"
#include "support/test_support.h"

namespace magnetar::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

json read_json(const std::string& path) {
    std::ifstream in(path);
    return json::parse(in);
}

TEST(AgentContract, TheCorpusShowsTheAgentsPreambleAndTools) {
    const std::string path = find_in_ancestors("scripts/train/agent_contract.json");
    ASSERT_FALSE(path.empty());
    const json j = read_json(path);
    json tools = json::array();
    for (const json& t : contract_tools()) tools.push_back(t);
    EXPECT_EQ(j.at("tools"), tools) << "scripts/train/agent_contract.json is out of date; its "
                                       "\"tools\" should be:\n"
                                    << tools.dump(1);
    std::string preamble = j.at("preamble").get<std::string>();
    const size_t at = preamble.find("{workdir}");
    ASSERT_NE(at, std::string::npos);
    preamble.replace(at, 9, "/home/ana/observatory");
    EXPECT_EQ(preamble, agent_preamble("/home/ana/observatory"))
        << "scripts/train/agent_contract.json's \"preamble\" is out of date";
}

TEST(AgentContract, TheCorpusToolResultsAreTheTools) {
    const std::string corpus = find_in_ancestors("scripts/train/corpus.py");
    ASSERT_FALSE(corpus.empty());
    const std::string dir = test::temp_dir();
    const std::string samples = dir + "/samples.json";
    std::string out;
    ASSERT_EQ(test::run_command("python3 " + corpus + " --tool-samples " + samples, &out), 0)
        << out;
    const json j = read_json(samples);
    const fs::path root = dir + "/world";
    for (const auto& [name, text] : j.at("files").items()) {
        fs::create_directories((root / name).parent_path());
        std::ofstream(root / name, std::ios::binary) << text.get<std::string>();
    }
    agent_tools tools(root);
    ASSERT_GE(j.at("calls").size(), 40u);
    for (const json& c : j.at("calls")) {
        const std::string name = c.at("name").get<std::string>();
        const tool_result r = tools.call(name, c.at("arguments"));
        EXPECT_EQ(result_header(name, c.at("arguments"), r.ok, 0, 1) + r.text,
                  c.at("result").get<std::string>())
            << name << " " << c.at("arguments").dump();
    }
}

}  // namespace
}  // namespace magnetar::agent
