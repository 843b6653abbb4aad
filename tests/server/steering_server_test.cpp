// Directional steering in the server: the server's scales (--dir-steering-*) and a request's
// own (the x_magnetar_steering extension field): a steered request answers as a server started
// with those scales does, a later unsteered request answers as before (the live timeline is
// forgotten when the scales change, never reused across them), and a field without a steering
// file, or out of range, is a 400 naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/steering.h"
#include "server/server.h"
#include "server/server_fixture.h"
#include "support/test_support.h"

namespace magnetar::server {
namespace {

using namespace server_fixture;

// Random unit directions for the default model, written once.
const std::string& direction_file() {
    static const std::string path = [] {
        const model_info& info = shared_engine()->info();
        steering_file f;
        f.n_layer = info.n_layer;
        f.n_embd = info.n_embd;
        f.model = info.name;
        f.arch = info.arch;
        Rng rng(11);
        for (uint32_t il = 0; il < info.n_layer; ++il) {
            std::vector<double> v(info.n_embd);
            double s = 0;
            for (double& x : v) {
                x = rng.uniform01() - 0.5;
                s += x * x;
            }
            for (double x : v) f.directions.push_back(static_cast<float>(x / std::sqrt(s)));
            f.layers.push_back(il);
        }
        const std::string p = test::temp_dir() + "/random.f32";
        write_steering_file(p, f);
        return p;
    }();
    return path;
}

// An engine over the default model with the direction file and these default scales.
const Engine& steered_engine(float ffn) {
    static std::unique_ptr<Engine> engines[2];
    std::unique_ptr<Engine>& e = engines[ffn == 0.0f ? 0 : 1];
    if (!e) {
        engine_options eo;
        eo.model_path = shared_engine()->info().path;
        eo.n_threads = 2;
        eo.steering_file = direction_file();
        eo.steering_ffn = ffn;
        const status st = Engine::load(eo, &e);
        EXPECT_TRUE(st.ok()) << st.message();
    }
    return *e;
}

server& server_of(const Engine& e) {
    static std::vector<std::pair<const Engine*, std::unique_ptr<server>>> servers;
    for (auto& [eng, s] : servers)
        if (eng == &e) return *s;
    server_options o = test_options();
    servers.emplace_back(&e, std::make_unique<server>(e, o));
    EXPECT_TRUE(servers.back().second->start());
    return *servers.back().second;
}

json chat(const std::string& user, const json& steering = nullptr) {
    json b{{"model", "deepseek-v4-flash"},
           {"messages", json::array({json{{"role", "user"}, {"content", user}}})},
           {"max_tokens", 40},
           {"thinking", false},
           {"temperature", 0}};
    if (!steering.is_null()) b["x_magnetar_steering"] = steering;
    return b;
}

std::string content(const json& r) {
    return r.at("choices").at(0).at("message").value("content", "");
}

constexpr int kAmplify = -20;

TEST(ServerSteering, ARequestsScalesAnswerAsAServerStartedWithThem) {
    REQUIRE_MODEL();
    const std::string q = "Tell me about magnetars.";
    int st = 0;
    // Reference answers: the plain server, and a server whose default FFN scale amplifies the
    // random directions enough to change the trained model's confident greedy reply.
    const json plain = post_json(shared_server().port(), "/v1/chat/completions", chat(q), &st);
    ASSERT_EQ(st, 200) << plain.dump();
    server& amplified = server_of(steered_engine(static_cast<float>(kAmplify)));
    const json amp = post_json(amplified.port(), "/v1/chat/completions", chat(q), &st);
    ASSERT_EQ(st, 200) << amp.dump();
    ASSERT_NE(content(plain), content(amp)) << "the direction changes nothing at " << kAmplify;

    // A server with the file at scale 0: unsteered by default, steered on request.
    server& s = server_of(steered_engine(0.0f));
    const json a = post_json(s.port(), "/v1/chat/completions", chat(q), &st);
    ASSERT_EQ(st, 200);
    EXPECT_EQ(content(a), content(plain));
    const json b = post_json(s.port(), "/v1/chat/completions", chat(q, {{"ffn", kAmplify}}), &st);
    ASSERT_EQ(st, 200) << b.dump();
    EXPECT_EQ(content(b), content(amp));
    EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], 0);  // not reused across
    const json c = post_json(s.port(), "/v1/chat/completions", chat(q), &st);
    ASSERT_EQ(st, 200);
    EXPECT_EQ(content(c), content(plain));
    EXPECT_EQ(c["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    // The same scales again reuse the live prefix.
    const json d = post_json(s.port(), "/v1/chat/completions", chat(q), &st);
    ASSERT_EQ(st, 200);
    EXPECT_GT(d["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
    EXPECT_EQ(content(d), content(plain));

    // Anthropic Messages takes the field too; an explicit {"ffn": 0} is the default here.
    json m{{"model", "m"},
           {"max_tokens", 40},
           {"messages", json::array({json{{"role", "user"}, {"content", q}}})},
           {"x_magnetar_steering", {{"ffn", kAmplify}}}};
    const json mr = post_json(s.port(), "/v1/messages", m, &st);
    ASSERT_EQ(st, 200) << mr.dump();
}

TEST(ServerSteering, TheFieldIsRefusedWithoutAFileOrOutOfRange) {
    REQUIRE_MODEL();
    int st = 0;
    const json r =
        post_json(shared_server().port(), "/v1/chat/completions", chat("hi", {{"ffn", 1}}), &st);
    EXPECT_EQ(st, 400);
    EXPECT_NE(r.dump().find("without a steering file"), std::string::npos) << r.dump();
    EXPECT_EQ(r["error"]["param"], "x_magnetar_steering") << r.dump();

    server& s = server_of(steered_engine(0.0f));
    const json big = post_json(s.port(), "/v1/chat/completions", chat("hi", {{"ffn", 500}}), &st);
    EXPECT_EQ(st, 400);
    EXPECT_NE(big.dump().find("x_magnetar_steering.ffn"), std::string::npos) << big.dump();
    const json odd = post_json(s.port(), "/v1/chat/completions", chat("hi", {{"scale", 1}}), &st);
    EXPECT_EQ(st, 400);
    EXPECT_NE(odd.dump().find("scale"), std::string::npos) << odd.dump();
    const json str = post_json(s.port(), "/v1/chat/completions", chat("hi", "strong"), &st);
    EXPECT_EQ(st, 400);
}

}  // namespace
}  // namespace magnetar::server
