// Boost compiles its archive internals only for its own archives; a new
// archive instantiates them once, here.
#include "dice/messages/bounded_archive.hpp"

#include <boost/archive/impl/archive_serializer_map.ipp>
#include <boost/archive/impl/basic_binary_iarchive.ipp>
#include <boost/archive/impl/basic_binary_iprimitive.ipp>

namespace boost::archive {

template class detail::archive_serializer_map<dice::bounded_iarchive>;
template class basic_binary_iprimitive<dice::bounded_iarchive, char,
                                       std::char_traits<char>>;
template class basic_binary_iarchive<dice::bounded_iarchive>;
template class binary_iarchive_impl<dice::bounded_iarchive, char,
                                    std::char_traits<char>>;

} // namespace boost::archive
