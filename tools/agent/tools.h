// The agent's built-in tools behind one call: the contract the model is shown (names,
// parameters, what each does) and the dispatcher that checks a call's arguments and runs it.
//
// Owns: the tool list and argument checking. Does not own: the tools' work (file_tools.h,
// jobs.h) or the DSML syntax of calls (src/chat).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/file_tools.h"
#include "agent/jobs.h"
#include "agent/workspace.h"

namespace magnetar::agent {

struct tool_param {
    std::string name;
    std::string type;  // "string", "integer", "number", "boolean"
    bool required = false;
    std::string description;
};

struct tool_spec {
    std::string name;
    std::string description;
    std::vector<tool_param> params;
};

// The built-in tools, in the order the contract lists them.
const std::vector<tool_spec>& tool_specs();

class agent_tools {
  public:
    agent_tools(const std::filesystem::path& root,
                const std::vector<std::filesystem::path>& also_allowed = {}, file_limits files = {},
                job_limits jobs = {});

    // Runs tool `name` with `args` (a JSON object; the DSML parameters of the call). Bad names
    // and arguments are results too (ok false), never exceptions: the model reads them.
    tool_result call(const std::string& name, const nlohmann::ordered_json& args);

    const workspace& space() const { return ws_; }
    file_tools& files() { return files_; }
    job_table& jobs() { return jobs_; }

  private:
    workspace ws_;
    file_tools files_;
    job_table jobs_;
};

}  // namespace magnetar::agent
