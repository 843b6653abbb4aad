// In-memory memory of recent Responses (POST /v1/responses with store != false), so that a
// request may continue one with `previous_response_id` inside the same process.
//
// Owns: the bounded id -> item-history map. Each entry keeps only the items its own request
// added (its input items and its output items) plus a shared pointer to the entry it
// continued, so a chain of N turns holds each item once; an entry evicted from the map stays
// alive as long as a newer entry continues it. Does not own: item normalisation or response
// shapes (api_responses.cpp). Nothing is persisted.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

namespace magnetar::server {

class response_store {
  public:
    using json = nlohmann::ordered_json;

    explicit response_store(size_t max_entries = 256) : max_entries_(max_entries) {}

    // Records response `id`: it continued `previous` ("" for none; must be known when given)
    // and added `items` (input items then output items, Responses item JSON). `response` is
    // the final response object (for GET /v1/responses/{id}).
    void put(const std::string& id, const std::string& previous, json items, json response);
    // True and the full item history of `id` (oldest first) when known.
    bool history(const std::string& id, json* items) const;
    // True and the stored response object of `id` when known.
    bool response(const std::string& id, json* out) const;
    // True and the item whose "id" is `item_id` when a stored response holds it: an item of
    // its output (as the response showed it) or one of its input items that carried an id
    // (Responses `item_reference` input items). Kept as long as its response is.
    bool item(const std::string& item_id, json* out) const;
    size_t size() const;

  private:
    struct entry {
        std::shared_ptr<const entry> parent;
        json items;                         // array
        json response;                      // object
        std::vector<std::string> item_ids;  // the ids it put in items_
    };
    size_t max_entries_;
    mutable std::mutex mu_;
    std::unordered_map<std::string, std::shared_ptr<const entry>> map_;
    std::deque<std::string> order_;  // insertion order, for eviction
    // Item id -> the latest item of that id, and how many stored entries hold the id (a
    // resolved item_reference is stored again by the response that used it): an id leaves
    // with the last entry that holds it.
    struct named_item {
        json item;
        size_t refs = 0;
    };
    std::unordered_map<std::string, named_item> items_;
    void release_items(const entry& e);
};

}  // namespace magnetar::server
