// OpenAI Responses (protocol §5.7).
#include "server/api.h"

namespace magnetar::server {

void handle_responses(context& ctx, const httplib::Request& req, httplib::Response& res) {
    (void)ctx;
    (void)req;
    (void)res;
    throw api_error(404, "unknown endpoint", "not_found_error");
}

}  // namespace magnetar::server
