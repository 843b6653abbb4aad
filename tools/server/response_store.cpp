// In-memory memory of recent Responses: see response_store.h.
#include "server/response_store.h"

#include <algorithm>
#include <vector>

namespace magnetar::server {

void response_store::put(const std::string& id, const std::string& previous, json items,
                         json response) {
    auto e = std::make_shared<entry>();
    // The items a later request may name: the input items that carried an id, then the output
    // as it was shown (a later one of the same id wins).
    std::vector<std::pair<std::string, json>> named;
    auto collect = [&named](const json& list) {
        if (!list.is_array()) return;
        for (const auto& item : list) {
            if (!item.is_object()) continue;
            auto it = item.find("id");
            if (it != item.end() && it->is_string() && !it->get<std::string>().empty())
                named.emplace_back(it->get<std::string>(), item);
        }
    };
    collect(items);
    if (response.is_object()) {
        if (auto out = response.find("output"); out != response.end()) collect(*out);
    }
    e->items = std::move(items);
    e->response = std::move(response);
    std::lock_guard<std::mutex> lock(mu_);
    if (!previous.empty()) {
        if (auto it = map_.find(previous); it != map_.end()) e->parent = it->second;
    }
    if (map_.count(id)) return;  // ids are never reused; a repeat is not stored twice
    for (auto& [item_id, item] : named) {
        named_item& n = items_[item_id];
        n.item = std::move(item);
        if (std::find(e->item_ids.begin(), e->item_ids.end(), item_id) == e->item_ids.end()) {
            e->item_ids.push_back(item_id);
            ++n.refs;
        }
    }
    map_.emplace(id, e);
    order_.push_back(id);
    while (map_.size() > max_entries_ && !order_.empty()) {
        if (auto it = map_.find(order_.front()); it != map_.end()) {
            release_items(*it->second);
            map_.erase(it);
        }
        order_.pop_front();
    }
}

void response_store::release_items(const entry& e) {
    for (const std::string& item_id : e.item_ids) {
        auto it = items_.find(item_id);
        if (it != items_.end() && --it->second.refs == 0) items_.erase(it);
    }
}

bool response_store::item(const std::string& item_id, json* out) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = items_.find(item_id);
    if (it == items_.end()) return false;
    *out = it->second.item;
    return true;
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
