#pragma once

// Internal: the behaviour both loaders share, for a stored type T.

#include "dice/actors/router.hpp"
#include "dice/actors/scheduling.hpp"
#include "dice/core/errc.hpp"
#include "dice/exchangers/loader_options.hpp"
#include "dice/logging/log.hpp"
#include "dice/pipeline/loaders.hpp"
#include "dice/security/trust.hpp"
#include "dice/storage/storage.hpp"
#include "security/senders.hpp"

#include "caf/actor_cast.hpp"
#include "caf/make_message.hpp"
#include "caf/send.hpp"

#include <string>
#include <vector>

namespace dice::detail {

/// State of a loader (both kinds).
struct loader_state {
  /// Owns the stored items.
  std::unique_ptr<storage_keeper> keeper;
  /// Settings.
  loader_options opts;
  /// A sweep is scheduled.
  bool sweeping = false;
  /// Messages dropped because of their sender, logged once per source.
  drop_log drops;
  /// Items stored (a segment or file each) for publishing.
  std::uint64_t stored = 0;
  /// Items published inline (below `opts.inline_below`).
  std::uint64_t inlined = 0;
  /// What the loader keeps ("Context", "Model"), for its log line.
  const char* what = "Item";

  loader_state() = default;
  loader_state(const loader_state&) = delete;
  loader_state& operator=(const loader_state&) = delete;

  /// Logs what the loader published, so a run's count of segments or files
  /// is in its log.
  ~loader_state() {
    if (stored + inlined > 0)
      log::info(opts.node,
                std::string{what} + " loader: published "
                  + std::to_string(stored)
                  + " stored items (a segment or file each) and "
                  + std::to_string(inlined) + " inline");
  }
};

/// What a kind of loader does with its own item type T.
template <class T>
struct loader_kind {
  /// What a missing item is called in DI-engine's warning ("Model").
  const char* missing;
  /// Reads a T from where `ref` (already confined) points.
  caf::expected<T> (*load)(const storage_ref& ref);
  /// The size `opts.inline_below` is compared with (null: always stored).
  std::size_t (*inline_size)(const T& x) = nullptr;
};

/// True if a loader with `opts` publishes `x` inline instead of storing it.
template <class T>
bool travels_inline(const loader_kind<T>& kind, const loader_options& opts,
                    const T& x) {
  return kind.inline_size != nullptr && opts.inline_below > 0
    && kind.inline_size(x) < opts.inline_below;
}

/// Loads a T that `ref` (from the wire) names, if a loader with `opts` may
/// open it (see dice::confine).
template <class T>
caf::expected<T> load_as(const loader_kind<T>& kind, const storage_ref& ref,
                         const storage_options& opts) {
  if (auto err = confine(ref, opts))
    return err;
  return kind.load(ref);
}

/// Schedules the next sweep at the oldest item's expiry (no periodic timer:
/// an idle loader has no timer at all).
template <class Self>
void arm_sweep(Self self) {
  auto& st = self->state;
  if (st.sweeping || st.keeper->size() == 0)
    return;
  st.sweeping = true;
  auto now = self->clock().now();
  auto at = st.keeper->next_expiry();
  auto delay = at > now ? std::chrono::duration_cast<caf::timespan>(at - now)
                        : caf::timespan{0};
  self->delayed_send(self, delay, tick_atom::value);
}

template <class T, class Self>
caf::expected<storage_ref> save_item(Self self, const T& x) {
  auto& st = self->state;
  auto ref = store(st.keeper->options(), x);
  if (!ref) {
    log::error(st.opts.node,
               "Got error when saving data: " + render(ref.error()));
    return ref;
  }
  // TTL counts from completion (DI-engine's file model loader; its storage
  // loader counted from the start of the save).
  st.keeper->add(*ref, self->clock().now());
  arm_sweep(self);
  return ref;
}

template <class Self>
void warn_load_failed(Self self, const char* missing, const caf::error& err) {
  auto& st = self->state;
  if (is(err, errc::storage_missing))
    log::warning(st.opts.node,
                 std::string{missing} + " file has been deleted on node "
                   + std::to_string(st.opts.node)
                   + ", maybe you can increase the ttl. (" + render(err) + ")");
  else
    log::error(st.opts.node, "Got error when loading data: " + render(err));
}

/// True if the current message comes from an actor of this node that
/// names itself and that no other node can name; drops it otherwise.
template <class Self>
bool admit(Self self, const char* what) {
  return admit_local(self, self->state.drops, self->state.opts.node, what,
                     "a loader takes requests from its own node only");
}

/// Item 3 of issue 9: what a reference points at must be data of the node
/// that sent the reference (the router checked that node is the forwarding
/// peer), or a stored snapshot could speak for another node.
template <class T, class Self>
bool from_origin(Self self, const storage_ref& ref, const T& x) {
  if (x.sender == ref.origin)
    return true;
  self->state.drops.drop(self->state.opts.node, trust_event::forged_origin,
                         self->current_sender(), "what " + ref.path + " holds",
                         "it names node " + std::to_string(x.sender)
                           + ", the reference came from node "
                           + std::to_string(ref.origin),
                         self->clock().now());
  return false;
}

/// The behaviour of a loader of T (`kind` says what differs).
template <class T, class Self>
auto loader_behavior(Self self, loader_options opts, loader_kind<T> kind) {
  self->state.opts = opts;
  self->state.what = kind.missing;
  self->state.keeper = std::make_unique<storage_keeper>(opts);
  // The keeper's destructor (with the state) removes what is left.
  return typename std::remove_pointer_t<Self>::behavior_type{
    [=](save_atom, const T& x) -> caf::result<storage_ref> {
      if (!admit(self, "a save"))
        return make_error(errc::unauthorized, "save from a stranger");
      auto ref = save_item<T>(self, x);
      if (!ref)
        return ref.error();
      return std::move(*ref);
    },
    [=](load_atom, const storage_ref& ref) -> caf::result<T> {
      if (!admit(self, "a load"))
        return make_error(errc::unauthorized, "load from a stranger");
      auto x = load_as(kind, ref, self->state.opts);
      if (!x) {
        warn_load_failed(self, kind.missing, x.error());
        return x.error();
      }
      return std::move(*x);
    },
    [=](save_atom, const T& x, const caf::actor& router,
        const std::vector<std::string>& topics) {
      if (!admit(self, "a save"))
        return;
      auto& st = self->state;
      auto b = caf::actor_cast<router_actor>(router);
      // A small item goes as itself, still through this mailbox: it keeps
      // its place among stored ones and precedes the flush before finish.
      if (travels_inline(kind, st.opts, x)) {
        ++st.inlined;
        for (auto& topic : topics)
          self->send(b, publish_atom::value, topic, st.opts.node,
                     caf::make_message(topic, x));
        return;
      }
      auto ref = save_item<T>(self, x);
      if (!ref)
        return;
      ++st.stored;
      for (auto& topic : topics)
        self->send(b, publish_atom::value, topic, st.opts.node,
                   caf::make_message(topic, *ref));
    },
    [=](load_atom, const storage_ref& ref, const caf::actor& to,
        const std::string& topic) -> bool {
      if (!admit(self, "a load"))
        return false;
      auto x = load_as(kind, ref, self->state.opts);
      if (!x) {
        warn_load_failed(self, kind.missing, x.error());
        return false;
      }
      if (!from_origin(self, ref, *x))
        return false;
      // Sent before the answer, in the loader's name (a role actor drops
      // anonymous messages): the receiver has the item when it learns that
      // the load is over.
      caf::send_as(caf::actor_cast<caf::actor>(self), to, topic, std::move(*x));
      return true;
    },
    [=](flush_atom) -> caf::result<bool> {
      if (!admit(self, "a flush"))
        return make_error(errc::unauthorized, "flush from a stranger");
      // Mailboxes are FIFO: every save queued before this is published.
      return true;
    },
    [=](tick_atom) {
      if (self->current_sender().get() != self->ctrl()) {
        admit(self, "a sweep tick");
        return;
      }
      auto& st = self->state;
      st.sweeping = false;
      st.keeper->sweep(self->clock().now());
      arm_sweep(self);
    },
  };
}

/// Spawns a loader with `behavior` (detached unless `opts.detached` is
/// false or the scheduler is deterministic: the test coordinator runs no
/// detached actors).
template <class Handle, class Behavior>
Handle spawn_loader(caf::actor_system& sys, Behavior behavior,
                    loader_options opts) {
  if (opts.detached && !deterministic_scheduler(sys))
    return sys.spawn<caf::detached>(behavior, std::move(opts));
  return sys.spawn(behavior, std::move(opts));
}

} // namespace dice::detail
