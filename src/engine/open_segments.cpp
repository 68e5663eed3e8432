// Open segments: ids, references and views (open_segments.h).
#include "engine/open_segments.h"

#include <fmt/format.h>

namespace hawser {

OpenSegments::OpenSegments(Fetch fetch, MakeView make_view, Changed changed)
    : fetch_(std::move(fetch)), make_view_(std::move(make_view)), changed_(std::move(changed)) {}

Status OpenSegments::open(const std::string& name, SegmentID& out) {
  if (name.empty()) return {Code::kInvalidArgument, "segment name is empty"};
  {
    std::lock_guard lk(mu_);
    auto it = segment_ids_.find(name);
    if (it != segment_ids_.end()) {
      segments_[it->second].refs++;
      out = it->second;
      return Status::OK();
    }
  }
  SegmentDesc d;
  Status s = fetch_(name, d);
  if (!s.ok()) return s;
  auto view = make_view_(std::move(d));
  std::lock_guard lk(mu_);
  auto it = segment_ids_.find(name);
  if (it != segment_ids_.end()) {  // raced with another open
    segments_[it->second].refs++;
    out = it->second;
    return Status::OK();
  }
  SegmentID id = next_segment_++;
  segments_[id] = OpenSegment{name, std::move(view), 1};
  segment_ids_[name] = id;
  out = id;
  return Status::OK();
}

Status OpenSegments::close(SegmentID id) {
  std::shared_ptr<const SegmentView> closed;  // dropped outside the lock
  {
    std::lock_guard lk(mu_);
    auto it = segments_.find(id);
    if (it == segments_.end()) return {Code::kSegmentNotFound, fmt::format("segment id {} is not open", id)};
    if (--it->second.refs > 0) return Status::OK();
    closed = std::move(it->second.view);
    segment_ids_.erase(it->second.name);
    segments_.erase(it);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (changed_) changed_();
  return Status::OK();
}

std::shared_ptr<const SegmentView> OpenSegments::view(SegmentID id) const {
  std::shared_lock lk(mu_);
  auto it = segments_.find(id);
  return it == segments_.end() ? nullptr : it->second.view;
}

std::shared_ptr<const SegmentView> OpenSegments::refresh(SegmentID id) {
  std::string name;
  {
    std::lock_guard lk(mu_);
    auto it = segments_.find(id);
    if (it == segments_.end()) return nullptr;
    name = it->second.name;
  }
  SegmentDesc d;
  if (!fetch_(name, d).ok()) return nullptr;
  auto fresh = make_view_(std::move(d));
  std::shared_ptr<const SegmentView> old;  // dropped outside the lock
  {
    std::lock_guard lk(mu_);
    auto it = segments_.find(id);
    if (it == segments_.end()) return nullptr;
    old = std::move(it->second.view);
    it->second.view = fresh;
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (changed_) changed_();
  return fresh;
}

size_t OpenSegments::size() const {
  std::shared_lock lk(mu_);
  return segments_.size();
}

int OpenSegments::refs(SegmentID id) const {
  std::shared_lock lk(mu_);
  auto it = segments_.find(id);
  return it == segments_.end() ? 0 : it->second.refs;
}

void OpenSegments::clear() {
  std::map<SegmentID, OpenSegment> gone;  // views dropped outside the lock
  {
    std::lock_guard lk(mu_);
    gone.swap(segments_);
    segment_ids_.clear();
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (changed_) changed_();
}

}  // namespace hawser
