// The agent loop on the engine: a user message, then replies and tool rounds until the model
// answers without calling a tool, over one live session whose timeline is the transcript.
//
// Each reply is sampled after the transcript's assistant opening; the DSML block is looked for
// only once the thinking block has closed, and generation stops where the block closes. The
// calls run in order through agent_tools and their results come back as one tool message each,
// headed by the call they answer. Only the new tokens of each step are evaluated: the session
// already holds everything before them.
//
// When the next step would not leave `reserve` tokens free, the conversation is compacted: the
// model writes a summary of its durable state, and the transcript becomes the system message,
// the summary and a verbatim tail (the latest user message and, when it fits, what followed
// it), with the shell jobs still running named.
//
// Owns: the loop, the live session, sampling, the context budget and compaction. Does not own:
// the messages' layout and tokens (transcript.h), the tools (tools.h), saving (library.h), the
// terminal (tools/cli/cmd_agent.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "agent/tools.h"
#include "agent/transcript.h"
#include "chat/dsml_stream.h"
#include "magnetar/engine.h"
#include "magnetar/sampler.h"
#include "magnetar/session.h"

namespace magnetar::agent {

// The line above a tool result: "[name k=v, ...: ok]" (or ": error]"), with "i/n " before the
// name when one reply made n > 1 calls (index is 0-based). Long values are cut, line breaks
// become spaces.
std::string result_header(const std::string& name, const nlohmann::ordered_json& args, bool ok,
                          size_t index, size_t count);

struct agent_options {
    int64_t n_ctx = 32768;
    int64_t chunk = 2048;
    chat::think_mode mode = chat::think_mode::think;
    std::string system;  // the user's system text, after agent_preamble
    sampling_params sampling;
    int64_t max_reply_tokens = 8192;  // one reply (reasoning, text and calls)
    int max_steps = 32;               // tool rounds in one turn
    // Compaction starts when fewer tokens than this would be free for the next reply
    // (0: a quarter of the context).
    int64_t reserve = 0;
    int64_t summary_tokens = 0;  // most tokens of the summary (0: an eighth of the context)
};

// What the loop reports while it runs (all optional).
struct agent_events {
    std::function<void(int64_t done, int64_t total)> prefill;      // absolute positions
    std::function<void(const chat::stream_event& e)> stream;       // reasoning, text, call deltas
    std::function<void(int64_t generated, double seconds)> token;  // per sampled token of a reply
    std::function<void(const std::string& name, const nlohmann::ordered_json& args)> tool_start;
    std::function<void(const std::string& name, const tool_result& r)> tool_end;
    std::function<void(const std::string& what)> note;   // compaction, limits, parse errors
    std::function<bool()> cancel;                        // polled; true interrupts
    std::function<void(const nlohmann::json& e)> trace;  // --trace records
};

// Figures of one evaluation-and-sampling step.
struct step_stats {
    int64_t prefilled = 0;
    int64_t generated = 0;
    double prefill_s = 0;
    double decode_s = 0;
};

struct turn_result {
    int steps = 0;  // replies sampled
    int calls = 0;  // tool calls run
    bool interrupted = false;
    bool step_limit = false;  // max_steps rounds and the model still called tools
    bool compacted = false;
    std::string answer;  // the visible text of the last reply
    step_stats total;
};

class agent {
  public:
    // Throws magnetar::Error (or std::runtime_error from the tools) when the engine has no
    // tokenizer or the session cannot be made.
    agent(const Engine& engine, agent_tools& tools, agent_options opts);
    ~agent();

    // One user message and everything it leads to. A failing engine call throws
    // magnetar::Error; an interrupt ends the turn with what was sampled kept.
    turn_result turn(const std::string& user_text, const agent_events& ev);
    // Compacts now (the `/compact` command); false when there is nothing to compact.
    bool compact(const agent_events& ev);
    // Evaluates what the transcript holds that the session does not (before a save).
    void sync(const agent_events& ev);

    const transcript& conversation() const { return t_; }
    // Replaces the conversation (a new or a restored one); the session keeps what is shared.
    void set_conversation(transcript t);
    transcript fresh_conversation() const;
    Session& session() { return *session_; }
    const Session& session() const { return *session_; }
    const agent_options& options() const { return opts_; }
    const Engine& engine() const { return engine_; }
    int64_t n_ctx() const { return opts_.n_ctx; }
    const step_stats& last_step() const { return last_; }

  private:
    // Brings the session to the transcript's tokens (the system prompt first, checkpointed).
    status catch_up(const eval_options& eo);
    // Samples one reply after the transcript's opening and appends it.
    chat::message reply(const agent_events& ev, int64_t max_tokens, bool* interrupted);
    void run_calls(const chat::message& m, const agent_events& ev, turn_result* r,
                   std::vector<std::string>* results);
    // Compaction is due when fewer than `need` tokens would stay free.
    bool room_for(int64_t need) const;
    bool compact_now(const agent_events& ev, bool keep_last_reply);

    const Engine& engine_;
    agent_tools& tools_;
    agent_options opts_;
    std::unique_ptr<Session> session_;
    transcript t_;
    sampler sampler_;
    step_stats last_;
};

}  // namespace magnetar::agent
