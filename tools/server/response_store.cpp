// In-memory memory of recent Responses: see response_store.h.
#include "server/response_store.h"

#include <vector>

namespace magnetar::server {

void response_store::put(const std::string& id, const std::string& previous, json items,
                         json response) {
    auto e = std::make_shared<entry>();
    e->items = std::move(items);
    e->response = std::move(response);
    std::lock_guard<std::mutex> lock(mu_);
    if (!previous.empty()) {
        if (auto it = map_.find(previous); it != map_.end()) e->parent = it->second;
    }
    if (map_.emplace(id, std::move(e)).second) order_.push_back(id);
    while (map_.size() > max_entries_ && !order_.empty()) {
        map_.erase(order_.front());
        order_.pop_front();
    }
}

bool response_store::history(const std::string& id, json* items) const {
    std::shared_ptr<const entry> e;
    {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = map_.find(id);
        if (it == map_.end()) return false;
        e = it->second;
    }
    // Entries are immutable once stored: the chain is walked without the lock.
    std::vector<const entry*> chain;
    for (const entry* p = e.get(); p; p = p->parent.get()) chain.push_back(p);
    *items = json::array();
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
        for (const auto& item : (*it)->items) items->push_back(item);
    }
    return true;
}

bool response_store::response(const std::string& id, json* out) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(id);
    if (it == map_.end()) return false;
    *out = it->second->response;
    return true;
}

size_t response_store::size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
}

}  // namespace magnetar::server
