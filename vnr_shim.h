/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C shim of vhost-net-rs: only what Rust cannot express. get_user() and
 * put_user() are macros that compile to one 16-bit load or store with
 * exception-table fixups; the Rust uaccess API copies bytes, which may tear
 * a ring index across a 256 boundary.
 */
#ifndef VNR_SHIM_H
#define VNR_SHIM_H

#include <linux/types.h>
#include <linux/compiler_types.h>

int vnr_get_user_u16(const u16 __user *uaddr, u16 *val);
int vnr_put_user_u16(u16 __user *uaddr, u16 val);

#endif
