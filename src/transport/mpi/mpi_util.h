// MPI helpers: a checked-call macro that turns an MPI error code into BASP_ERROR_MPI with MPI's own string,
// and RAII owners for communicators and datatypes (freed only while MPI is still initialised).
#pragma once

#include <mpi.h>

#include <string>

#include "common/error.h"

namespace basp::transport::mpi {

std::string error_string(int code);

#define BASP_MPI_CHECK(call)                                                                                        \
  do {                                                                                                              \
    const int basp_mpi_rc_ = (call);                                                                                \
    if (basp_mpi_rc_ != MPI_SUCCESS) {                                                                              \
      ::basp::detail::fail(BASP_ERROR_MPI, #call, " failed: ", ::basp::transport::mpi::error_string(basp_mpi_rc_)); \
    }                                                                                                               \
  } while (0)

bool mpi_alive();

class OwnedComm {
 public:
  OwnedComm() = default;
  explicit OwnedComm(MPI_Comm c) : comm_(c) {}
  OwnedComm(const OwnedComm&) = delete;
  OwnedComm& operator=(const OwnedComm&) = delete;
  OwnedComm(OwnedComm&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  OwnedComm& operator=(OwnedComm&& o) noexcept {
    if (this != &o) {
      reset();
      comm_ = o.comm_;
      o.comm_ = MPI_COMM_NULL;
    }
    return *this;
  }
  ~OwnedComm() { reset(); }
  MPI_Comm get() const { return comm_; }
  // MPI_Comm_free never blocks (Open MPI frees locally; pending point-to-point operations finish on their own).
  void reset() {
    if (comm_ != MPI_COMM_NULL && mpi_alive()) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }
  // Forgets the communicator without freeing it: for one that holds an abandoned collective (mpi_collectives.h).
  void leak() { comm_ = MPI_COMM_NULL; }
  // Hands the communicator to another owner.
  MPI_Comm release() {
    MPI_Comm c = comm_;
    comm_ = MPI_COMM_NULL;
    return c;
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

class OwnedType {
 public:
  OwnedType() = default;
  explicit OwnedType(MPI_Datatype t) : type_(t) {}
  OwnedType(const OwnedType&) = delete;
  OwnedType& operator=(const OwnedType&) = delete;
  OwnedType(OwnedType&& o) noexcept : type_(o.type_) { o.type_ = MPI_DATATYPE_NULL; }
  OwnedType& operator=(OwnedType&& o) noexcept {
    if (this != &o) {
      reset();
      type_ = o.type_;
      o.type_ = MPI_DATATYPE_NULL;
    }
    return *this;
  }
  ~OwnedType() { reset(); }
  MPI_Datatype get() const { return type_; }
  void reset() {
    if (type_ != MPI_DATATYPE_NULL && mpi_alive()) MPI_Type_free(&type_);
    type_ = MPI_DATATYPE_NULL;
  }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
};

// A duplicate of `comm` that returns errors instead of aborting. Collective over `comm`.
OwnedComm dup_with_errors_return(MPI_Comm comm);

}  // namespace basp::transport::mpi
