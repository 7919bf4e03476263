#include "dice/actors/gate.hpp"

#include "dice/trust.hpp"

#include "caf/event_based_actor.hpp"
#include "caf/mailbox_element.hpp"
#include "caf/system_messages.hpp"

namespace dice {

namespace {

class gate : public caf::event_based_actor {
 public:
  gate(caf::actor_config& cfg, caf::actor bus)
    : caf::event_based_actor(cfg), bus_(std::move(bus)) {
    // nop
  }

  // Exit messages are dropped before they reach the mailbox: a trapped
  // exit handler would not see exit_reason::kill.
  void enqueue(caf::mailbox_element_ptr ptr, caf::execution_unit* eu) override {
    if (ptr && ptr->content().match_elements<caf::exit_msg>()) {
      count(trust_event::remote_exit_ignored);
      return;
    }
    caf::event_based_actor::enqueue(std::move(ptr), eu);
  }

  const char* name() const override {
    return "dice.gate";
  }

  caf::behavior make_behavior() override {
    monitor(bus_);
    set_down_handler([this](caf::down_msg&) {
      quit();
    });
    set_default_handler(
      [this](caf::scheduled_actor*,
             caf::message_view& x) -> caf::result<caf::message> {
        delegate(bus_, x.move_content_to_message());
        return caf::delegated<caf::message>{};
      });
    return {[](caf::unit_t) {
      // nop: everything goes through the default handler
    }};
  }

 private:
  caf::actor bus_;
};

} // namespace

caf::actor spawn_gate(caf::actor_system& sys, const bus_actor& bus) {
  return sys.spawn<gate>(caf::actor_cast<caf::actor>(bus));
}

} // namespace dice
