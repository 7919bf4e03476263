#pragma once

#include "dice/messages/context_ack.hpp"
#include "dice/messages/context_delta.hpp"
#include "dice/messages/event.hpp"
#include "dice/messages/model_snapshot.hpp"
#include "dice/messages/storage_ref.hpp"

#include "caf/message.hpp"
#include "caf/type_id.hpp"

#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>

namespace dice {

/// A named event stream of values of type `T` (DI-engine's event name of
/// `task.emit` / `task.on`, typed): `node_services::emit(t, value)` publishes,
/// `node_services::on(t, fn)` subscribes. `T` may be any type registered in a
/// CAF type-ID block (the user's own or dice's) on every node.
template <class T>
class topic {
 public:
  static_assert(caf::has_type_id<T>::value,
                "dice::topic<T>: register T in a CAF type-ID block "
                "(CAF_ADD_TYPE_ID) and add that block to every node's config");

  /// The type of the values on this topic.
  using value_type = T;

  /// A topic called `name` (the same name on every node).
  explicit topic(std::string name) : name_(std::move(name)) {
    // nop
  }

  /// The topic's name.
  const std::string& name() const noexcept {
    return name_;
  }

 private:
  std::string name_;
};

/// True for dice's own messages, which travel unwrapped as `(topic, T)`
/// (routers check the node each names); any other type rides in an `event`.
template <class T>
struct travels_unwrapped
  : std::integral_constant<bool,
                           std::is_same<T, context_delta>::value
                             || std::is_same<T, model_snapshot>::value
                             || std::is_same<T, storage_ref>::value
                             || std::is_same<T, context_ack>::value> {};

namespace detail {

/// A value that arrived on a topic, without its static type: a typed
/// handler asks for its own type and gets null for any other.
class topic_value {
 public:
  /// A dice message the role actor received unwrapped.
  template <class T>
  static topic_value of(const T& x) noexcept {
    topic_value result;
    result.ptr_ = &x;
    result.type_ = &typeid(T);
    return result;
  }

  /// The content of a user's event (one element).
  static topic_value of_event(const caf::message& content) noexcept {
    topic_value result;
    result.content_ = &content;
    return result;
  }

  /// The value if it is a `T`, else null.
  template <class T>
  const T* get() const noexcept {
    if (content_ != nullptr)
      return content_->size() == 1 && content_->match_element<T>(0)
        ? &content_->get_as<T>(0)
        : nullptr;
    return type_ != nullptr && *type_ == typeid(T) ? static_cast<const T*>(ptr_)
                                                   : nullptr;
  }

 private:
  const void* ptr_ = nullptr;
  const std::type_info* type_ = nullptr;
  const caf::message* content_ = nullptr;
};

} // namespace detail

} // namespace dice
