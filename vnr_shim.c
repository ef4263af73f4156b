// SPDX-License-Identifier: GPL-2.0
/* See vnr_shim.h. Each function is one single-copy-atomic user access. */
#include <linux/uaccess.h>
#include "vnr_shim.h"

int vnr_get_user_u16(const u16 __user *uaddr, u16 *val)
{
	return get_user(*val, uaddr);
}

int vnr_put_user_u16(u16 __user *uaddr, u16 val)
{
	return put_user(val, uaddr);
}
