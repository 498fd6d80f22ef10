/* SPDX-License-Identifier: MIT */
/*
 * Admission: the budgets all requests share.  Each has this one owner, one
 * take and one give back; others only ask.  Loop thread only.
 *
 *  - slots: messages being decrypted, at most queue-length.  A request
 *    takes one when it first has work for a worker (its first DATA, or an
 *    END), never for a DECRYPT frame alone, and gives it back only once it
 *    is answered and no job of it is out, so a timed-out message whose job
 *    still runs keeps its slot until the job returns.
 *  - held: plaintext held back for verified-only requests, at most
 *    max-verified-total for all of them.
 *  - pending passwords: the secure memory that requests which have not
 *    started yet hold for their PASSWORD (and SESSION_KEY_IN), at most
 *    PD_ADM_PENDING_PW_MAX for all of them (such requests are not bounded
 *    by queue-length, and the secure heap is small and shared with the
 *    keys).  Given back when the request takes its slot: from then on
 *    queue-length bounds it, though its first job copies it only later.
 *  - memory: what messages in progress allocate, at most max-memory: each
 *    request's buffers (taken with its slot) and, through the engine's
 *    pd_budget, its layers, decompressors, AEAD chunk buffer and Argon2
 *    derivations.  Thread-safe (workers take from it too); the limit is
 *    the one of the configuration loaded at start.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** Take a slot; false when queue-length are taken. */
bool pd_adm_slot_take(void);
/** Give one back (asserts one was taken). */
void pd_adm_slot_give(void);
/** Slots taken: messages in progress. */
unsigned pd_adm_slots(void);

/** Take n bytes of the held budget; false (nothing taken) when that would
 * exceed max-verified-total. */
bool pd_adm_held_take(size_t n);
/** Give n bytes back (asserts they were taken). */
void pd_adm_held_give(size_t n);
/** Bytes held now, all requests. */
uint64_t pd_adm_held(void);

#define PD_ADM_PENDING_PW_MAX (256u << 10)
/** Take n octets of the pending-password budget; false when full. */
bool pd_adm_pending_pw_take(size_t n);
void pd_adm_pending_pw_give(size_t n);

/** The memory budget (created on first use with max-memory); NULL only
 * when it could not be allocated. */
struct pd_budget *pd_adm_memory(void);
